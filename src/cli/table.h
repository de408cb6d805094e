// Text output for the client commands: a table printer and small formatters.
//
// Table collects rows of cells and renders them like `squeue` or `kubectl get`: a header
// row, left-aligned columns two spaces apart, each as wide as its widest cell, and a cell
// longer than its column's maximum width cut short with "…". Widths count UTF-8 code
// points, not bytes. The formatters turn wire values into short human text ("0-3,6",
// "node[1-3]", "2.5 GiB", "01:30:00"). Everything here is a pure function of its inputs;
// a Table is a plain value owned by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::cli {

class Table {
 public:
  // Every column is at most `max_width` wide unless SetMaxWidth says otherwise.
  explicit Table(std::vector<std::string> header, size_t max_width = 40);

  // Per-column maximum width (0: unlimited). Out-of-range columns are ignored.
  void SetMaxWidth(size_t column, size_t width);

  // A row with fewer cells than the header is padded with empty cells; extra cells are
  // dropped.
  void AddRow(std::vector<std::string> cells);

  size_t rows() const { return rows_.size(); }

  // The table, one line per row, header first, each line ending in '\n'. Trailing spaces
  // are trimmed; `indent` spaces prefix every line.
  std::string Render(size_t indent = 0) const;

 private:
  std::vector<std::string> header_;
  std::vector<size_t> max_width_;
  std::vector<std::vector<std::string>> rows_;
};

// Number of UTF-8 code points in `s` (a byte that is not valid UTF-8 counts as one).
size_t DisplayWidth(std::string_view s);

// `s` itself if it fits in `max_width` code points, else its first max_width-1 code points
// and "…". Newlines and tabs become spaces so that a cell stays on one line. A max_width
// of 0 means unlimited.
std::string Truncate(std::string_view s, size_t max_width);

// Sorted, deduplicated indices with runs collapsed: {0,1,2,3,6} → "0-3,6"; {} → "-".
std::string FormatIndexList(std::vector<int> indices);

// Host names with a common prefix and numeric suffixes collapsed Slurm-style:
// {"node1","node2","node3","gpu-a"} → "node[1-3],gpu-a"; zero padding is kept
// ("n01,n02" → "n[01-02]"). Prefix groups keep their first appearance's order; {} → "-".
std::string FormatHostList(const std::vector<std::string>& hosts);

// Bytes as GiB with one decimal: 85899345920 → "80.0 GiB"; 0 → "-".
std::string FormatGiB(int64_t bytes);

// A command line for display: arguments joined by spaces, each one quoted for a POSIX
// shell only when it needs it: {"python","-c","print(1)"} → "python -c 'print(1)'".
std::string ShellJoin(const std::vector<std::string>& argv);

// Joins with `sep`; an empty list gives `empty`.
std::string Join(const std::vector<std::string>& items, std::string_view sep,
                 std::string_view empty = "-");

// "SIGKILL" for 9, or "signal 64" for a number without a well-known name.
std::string SignalName(int signal);

}  // namespace cohort::cli
