#include "cli/table.h"

#include <gtest/gtest.h>

namespace cohort::cli {
namespace {

TEST(TableTest, AlignsColumnsToTheWidestCell) {
  Table t({"ID", "NAME", "STATE"});
  t.AddRow({"1", "train", "RUNNING"});
  t.AddRow({"12", "eval-long-name", "PENDING"});
  EXPECT_EQ(t.Render(),
            "ID  NAME            STATE\n"
            "1   train           RUNNING\n"
            "12  eval-long-name  PENDING\n");
}

TEST(TableTest, HeaderOnlyWhenEmptyAndTrailingSpacesTrimmed) {
  Table t({"A", "LONGER"});
  EXPECT_EQ(t.Render(), "A  LONGER\n");
  Table u({"A", "B"});
  u.AddRow({"xxxx", ""});
  EXPECT_EQ(u.Render(), "A     B\nxxxx\n");
}

TEST(TableTest, PadsShortRowsAndDropsExtraCells) {
  Table t({"A", "B"});
  t.AddRow({"1"});
  t.AddRow({"2", "3", "ignored"});
  EXPECT_EQ(t.Render(), "A  B\n1\n2  3\n");
}

TEST(TableTest, TruncatesOverlongCellsWithEllipsis) {
  Table t({"NAME", "X"}, 6);
  t.AddRow({"abcdefghij", "1"});
  t.AddRow({"abcdef", "2"});
  // "abcde…" is six code points wide (eight bytes); columns still line up.
  EXPECT_EQ(t.Render(),
            "NAME    X\n"
            "abcde…  1\n"
            "abcdef  2\n");
}

TEST(TableTest, PerColumnMaxWidthAndIndent) {
  Table t({"A", "B"}, 0);
  t.SetMaxWidth(1, 3);
  t.AddRow({"a-very-long-cell-is-fine", "xyzw"});
  EXPECT_EQ(t.Render(2),
            "  A                         B\n"
            "  a-very-long-cell-is-fine  xy…\n");
}

TEST(TableTest, CellsStayOnOneLine) {
  Table t({"A"});
  t.AddRow({"two\nlines\tand tab"});
  EXPECT_EQ(t.Render(), "A\ntwo lines and tab\n");
}

TEST(TableTest, WidthCountsCodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("héllo"), 5u);
  EXPECT_EQ(DisplayWidth("…"), 1u);
  EXPECT_EQ(Truncate("héllo wörld", 5), "héll…");
  EXPECT_EQ(Truncate("short", 5), "short");
  EXPECT_EQ(Truncate("anything", 0), "anything");
  EXPECT_EQ(Truncate("abc", 1), "…");
}

TEST(FormatTest, IndexListCollapsesRuns) {
  EXPECT_EQ(FormatIndexList({}), "-");
  EXPECT_EQ(FormatIndexList({3}), "3");
  EXPECT_EQ(FormatIndexList({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatIndexList({6, 3, 2, 0, 1}), "0-3,6");
  EXPECT_EQ(FormatIndexList({0, 2, 4}), "0,2,4");
  EXPECT_EQ(FormatIndexList({1, 1, 2}), "1-2");
  EXPECT_EQ(FormatIndexList({0, 1, 4, 5, 6, 7}), "0-1,4-7");
}

TEST(FormatTest, HostListCollapsesNumericSuffixes) {
  EXPECT_EQ(FormatHostList({}), "-");
  EXPECT_EQ(FormatHostList({"node1"}), "node1");
  EXPECT_EQ(FormatHostList({"node1", "node2", "node3"}), "node[1-3]");
  EXPECT_EQ(FormatHostList({"node3", "node1", "node2", "node7"}), "node[1-3,7]");
  EXPECT_EQ(FormatHostList({"n01", "n02", "n03"}), "n[01-03]");
  EXPECT_EQ(FormatHostList({"node-1", "gpu-a", "node-2"}), "node-[1-2],gpu-a");
  EXPECT_EQ(FormatHostList({"a1", "b1"}), "a1,b1");
  EXPECT_EQ(FormatHostList({"n9", "n10"}), "n[9-10]");
  EXPECT_EQ(FormatHostList({"n09", "n10"}), "n[09-10]");
  EXPECT_EQ(FormatHostList({"n08", "n9"}), "n[08,9]");
}

TEST(FormatTest, Misc) {
  EXPECT_EQ(FormatGiB(0), "-");
  EXPECT_EQ(FormatGiB(80LL << 30), "80.0 GiB");
  EXPECT_EQ(FormatGiB(3LL << 29), "1.5 GiB");
  EXPECT_EQ(ShellJoin({"python", "train.py", "--lr=3e-4"}), "python train.py --lr=3e-4");
  EXPECT_EQ(ShellJoin({"sh", "-c", "echo hi; exit 1"}), "sh -c 'echo hi; exit 1'");
  EXPECT_EQ(ShellJoin({"echo", "it's", ""}), "echo 'it'\\''s' ''");
  EXPECT_EQ(Join({"a", "b"}, ", "), "a, b");
  EXPECT_EQ(Join({}, ", "), "-");
  EXPECT_EQ(SignalName(9), "SIGKILL");
  EXPECT_EQ(SignalName(15), "SIGTERM");
  EXPECT_EQ(SignalName(64), "signal 64");
}

}  // namespace
}  // namespace cohort::cli
