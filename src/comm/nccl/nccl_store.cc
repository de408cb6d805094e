#include "comm/nccl/nccl_store.h"

#include <cstring>

#include "comm/nccl/nccl_errors.h"

namespace cohort::comm::nccl_backend {

std::string EncodeUniqueId(const ncclUniqueId& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(sizeof(id.internal) * 2);
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

Result<ncclUniqueId> DecodeUniqueId(std::string_view hex) {
  ncclUniqueId id;
  if (hex.size() != sizeof(id.internal) * 2) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "malformed ncclUniqueId in the store: {} hex digits, want {}", hex.size(),
                  sizeof(id.internal) * 2);
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "malformed ncclUniqueId in the store: non-hex digit at {}", 2 * i);
    }
    id.internal[i] = static_cast<char>((hi << 4) | lo);
  }
  return id;
}

Result<ncclUniqueId> ShareUniqueId(const std::shared_ptr<Store>& store,
                                   const std::string& key_prefix, bool is_root, Millis timeout) {
  const std::string key = key_prefix + "id";
  if (is_root) {
    ncclUniqueId id;
    COHORT_NCCL_CHECK(ncclGetUniqueId(&id));
    if (store != nullptr) COHORT_TRY_VOID(store->Set(key, EncodeUniqueId(id)));
    return id;
  }
  if (store == nullptr) {
    return Errorf(ErrorCode::kInvalidArgument, "a rendezvous store is required to share the ncclUniqueId");
  }
  auto hex = store->Get(key, timeout);
  if (!hex) return std::unexpected(hex.error());
  return DecodeUniqueId(*hex);
}

}  // namespace cohort::comm::nccl_backend
