// Job arrays: the index set of `cohort submit --array` (Slurm's syntax) and its compact
// form.
//
//   --array 0-999%16       indices 0..999, at most 16 elements running (or waiting placed) at once
//   --array 0-99:2         0, 2, ..., 98 (a step)
//   --array 1,3,5-7        a list of indices and ranges
//
// An ArrayIndexSet is a sorted list of disjoint stepped ranges: a 100,000-element array is
// one range, so an array is stored as one record however many elements it has (the head
// keeps its not-yet-started indices in that form, head/core/arrays.h). Pure values; any
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/types.h"
#include "common/error.h"

namespace cohort::api {

// Limits, as Slurm's MaxArraySize: an index is 0..kMaxArrayIndex, at most kMaxArrayElements
// elements, at most kMaxArrayRanges comma-separated parts.
inline constexpr int64_t kMaxArrayIndex = 9'999'999;
inline constexpr int64_t kMaxArrayElements = 1'000'000;
inline constexpr size_t kMaxArrayRanges = 10'000;

// first, first + step, ..., last (last is always a member: first + k * step).
struct ArrayRange {
  int64_t first = 0;
  int64_t last = 0;
  int64_t step = 1;
  int64_t count() const { return (last - first) / step + 1; }
  bool operator==(const ArrayRange&) const = default;
};

class ArrayIndexSet {
 public:
  ArrayIndexSet() = default;

  // "0-9,12,20-30:5": the ranges in any order; overlapping ones are merged. kInvalidArgument
  // naming `field` for an empty part, a missing end ("0-"), a descending range ("5-1"), a
  // step below 1, an index outside 0..kMaxArrayIndex, or more than kMaxArrayElements.
  static Result<ArrayIndexSet> Parse(std::string_view text, const std::string& field);

  // The canonical text Parse reads back: ranges ascending, "5", "5-9", "0-98:2".
  std::string ToString() const;

  int64_t size() const;
  bool empty() const { return ranges_.empty(); }
  bool contains(int64_t index) const;
  int64_t min() const { return ranges_.front().first; }  // requires !empty()
  int64_t max() const { return ranges_.back().last; }    // requires !empty()
  const std::vector<ArrayRange>& ranges() const { return ranges_; }

  // Removes and returns the `n` smallest indices (fewer if the set has fewer).
  std::vector<int64_t> TakeFirst(int64_t n);
  // Removes `index`; false if it was not a member.
  bool Remove(int64_t index);
  // Adds `index` back (after a failed start); no effect if already a member.
  void Add(int64_t index);

  bool operator==(const ArrayIndexSet&) const = default;

 private:
  void Normalize();  // sorts, merges and splits so ranges are disjoint and ascending
  std::vector<ArrayRange> ranges_;
};

// A spec's `array`: the indices and the throttle ("%16": at most 16 elements active at once;
// 0: no limit).
struct ArraySpec {
  ArrayIndexSet indices;
  int throttle = 0;
  // "0-999%16"; "" for no array.
  std::string ToString() const;
};

// Parses "INDICES[%THROTTLE]"; kInvalidArgument naming `field` (e.g. "%0", "0-", "5-1").
Result<ArraySpec> ParseArraySpec(std::string_view text, const std::string& field);

// The parts of `text` between `sep`s, empty ones included ("1,,2" → "1", "", "2"; "" → "").
std::vector<std::string_view> SplitParts(std::string_view text, char sep);

// A job or one element of an array, as users write it: "12" or "12_7" (Slurm's form).
struct JobRef {
  int64_t job = 0;
  int64_t task = -1;  // -1: the job itself
  bool is_element() const { return task >= 0; }
};
// kInvalidArgument naming `field` unless `text` is a positive id, optionally followed by
// '_' and an array index.
Result<JobRef> ParseJobRef(std::string_view text, const std::string& field);

// How `cohort queue` names a job: "12"; an element "12_7"; an array with indices not yet
// started, those indices and its throttle, as Slurm collapses them: "12_[5-999%16]".
std::string DisplayJobId(const Job& job);

}  // namespace cohort::api
