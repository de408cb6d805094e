// safetensors (Hugging Face's tensor file format): an 8-byte little-endian header length
// N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}, then the tensor bytes. This reads F32, F16 and BF16 tensors
// (converted to float32) and writes F32. Free functions; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

struct SafeTensor {
  std::string dtype;            // as stored: "F32", "F16", "BF16"
  std::vector<int64_t> shape;
  std::vector<float> data;      // converted to float32, row-major
};

struct SafeTensorFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Chooses which tensors ReadSafeTensors loads (true = load); empty loads every tensor.
using SafeTensorFilter = std::function<bool(const std::string& name)>;

// kNotFound for a missing file; kInvalidArgument naming the file and tensor for a header
// that is not valid JSON, a header length larger than the file, an unsupported dtype,
// offsets outside the data or overlapping, or a byte count that disagrees with the shape.
// Every entry of the header is checked; only the tensors `select` accepts are read and
// converted (so a file's buffers of other dtypes can be skipped; a filter that accepts
// nothing reads the header alone).
Result<SafeTensorFile> ReadSafeTensors(const std::string& path,
                                       const SafeTensorFilter& select = {});

// Writes F32 tensors (names sorted; the header is padded with spaces so the data starts
// 8-byte aligned; tensors are contiguous, as the format allows no holes) to a temporary
// file, fsyncs and renames it over `path`. kInvalidArgument when a tensor's data length
// disagrees with its shape; kUnavailable on I/O errors.
Result<void> WriteSafeTensors(const std::string& path, const SafeTensorFile& file);

}  // namespace cohort::engine
