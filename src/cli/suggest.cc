#include "cli/suggest.h"

#include <algorithm>

#include <fmt/format.h>


namespace cohort::cli {
namespace {

// The option of `app` or a parent that `name` ("--head", "-N") names, or null.
const CLI::Option* FindFlag(const CLI::App* app, const std::string& name) {
  for (; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->get_positional() && opt->get_lnames().empty() && opt->get_snames().empty()) continue;
      if (name.starts_with("--")) {
        const auto& l = opt->get_lnames();
        if (std::find(l.begin(), l.end(), name.substr(2)) != l.end()) return opt;
      } else if (name.size() >= 2) {
        const auto& s = opt->get_snames();
        if (std::find(s.begin(), s.end(), name.substr(1, 1)) != s.end()) return opt;
      }
    }
  }
  return nullptr;
}

CLI::App* FindSubcommand(CLI::App& app, std::string_view word) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->check_name(std::string(word))) return sub;
  }
  return nullptr;
}

// The optimal string alignment distance: edits, with a swap of two neighbours counted as
// one ("hlod" is one typo from "hold").
size_t TypoDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// argv with word `at` replaced by `fix`, as a command line to show.
std::string Corrected(int argc, const char* const* argv, int at, const std::string& fix) {
  std::string out = "cohort";
  for (int i = 1; i < argc; ++i) out += " " + (i == at ? fix : std::string(argv[i]));
  return out;
}

std::string Hint(std::string_view what, std::string_view typed, std::string_view where, const std::vector<std::string>& close, int argc,
                 const char* const* argv, int at) {
  if (close.empty()) return "";
  std::string text =
      fmt::format("unknown {} '{}'{}; did you mean: {}", what, typed, where, Corrected(argc, argv, at, close[0]));
  for (size_t i = 1; i < close.size(); ++i) text += fmt::format(" (or {})", close[i]);
  return text;
}

}  // namespace

std::vector<std::string> ClosestNames(std::string_view typed, const std::vector<std::string>& candidates, size_t max) {
  const size_t limit = std::clamp<size_t>((typed.size() + 1) / 3, 1, 3);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    size_t d = TypoDistance(typed, c);
    if (typed.size() >= 2 && c.starts_with(typed) && c != typed) d = std::min(d, limit);
    if (d <= limit && c != typed) scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [d, c] : scored) {
    if (out.size() >= max) break;
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  }
  return out;
}

std::string SlurmFlagHint(std::string_view flag) {
  static constexpr std::pair<std::string_view, std::string_view> kHints[] = {
      {"-o", "output"}, {"--output", "output"}, {"-e", "output"}, {"--error", "output"}, {"--open-mode", "output"},
      {"--partition", "partition"}, {"-q", "qos"}, {"--qos", "qos"}, {"--gres", "gres"}, {"--ntasks", "ntasks"},
      {"--mem-per-cpu", "mem"}, {"--mem-per-gpu", "mem"},
      {"--requeue", "requeue"}, {"--mail-type", "mail"}, {"--mail-user", "mail"}, {"--exclusive", "exclusive"}};
  std::string_view what;
  for (const auto& [name, topic] : kHints) {
    if (name == flag) what = topic;
  }
  if (what == "output") {
    return "cohort keeps each rank's output (stdout and stderr) on its node: read it with cohort logs JOB "
           "(-f follows, --rank R shows one rank, 12_7 an array's element); cohort submit -o/--output and "
           "-e/--error also write it to files";
  }
  if (what == "partition") {
    return "cohort has no partitions: choose nodes by feature with -C/--constraint (cohort agent --features) or by "
           "name with -w/--nodelist (here -p is the job's priority)";
  }
  if (what == "qos") return "cohort has no QOS: -p/--priority orders the queue and teams hold GPU quotas (cohort team ls)";
  if (what == "gres") return "ask for GPUs with -G/--gpus [TYPE:]COUNT per node (Slurm's --gres=gpu:h100:4 is -G h100:4)";
  if (what == "ntasks") {
    return "cohort counts tasks per node: -N NODES -n TASKS_PER_NODE (Slurm's -N 2 --ntasks 8 is -N 2 -n 4)";
  }
  if (what == "mem") return "cohort reserves memory per node: --mem SIZE (e.g. --mem 64G)";
  if (what == "requeue") {
    return "a failed gang or one on a lost node is restarted with --max-restarts N; cohort requeue JOB puts a "
           "running or ended job back in the queue";
  }
  if (what == "mail") return "cohort sends no mail: cohort submit --wait waits for the job's end";
  if (what == "exclusive") {
    return "cohort has no --exclusive: a job's GPUs and CPUs are its own; to keep a node to one job, ask for all of "
           "its GPUs (-G)";
  }
  return "";
}

std::vector<std::string> SubcommandNames(CLI::App& app) {
  std::vector<std::string> out;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    out.push_back(sub->get_name());
    for (const auto& a : sub->get_aliases()) out.push_back(a);
  }
  return out;
}

std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> out;
  auto add = [&out](std::string name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
  };
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    for (const CLI::Option* opt : a->get_options()) {
      for (const auto& l : opt->get_lnames()) add("--" + l);
      for (const auto& s : opt->get_snames()) add("-" + s);
    }
  }
  return out;
}

std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* a = app.get_parent(); a != nullptr; a = a->get_parent()) path = a->get_name() + " " + path;
  return path;
}

std::string DidYouMean(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return "";  // the rest is a command's own argv
    if (word.size() > 1 && word[0] == '-') {
      const std::string name = word.substr(0, word.find('='));
      const CLI::Option* opt = FindFlag(current, word.starts_with("--") ? name : word.substr(0, 2));
      if (opt == nullptr) {
        const bool negative_number =
            word.size() > 1 && word.find_first_not_of("0123456789.", 1) == std::string::npos;
        // "-N2": a short flag with its value; "-12": a number where none may be negative.
        if (!word.starts_with("--") && word.size() > 2 && !negative_number) continue;
        const std::string cmd = CommandPath(*current);  // "cohort token create"
        const std::string where = current == &app ? "" : " of " + cmd;
        if (negative_number) {
          return fmt::format("'{}' is not a flag{}, and no argument of {} may be negative ({} --help lists "
                             "what it takes)", word, where, cmd, cmd);
        }
        if (!word.starts_with("--")) {
          // Every one-letter flag is one edit from any other: a guess would be noise.
          return fmt::format("unknown flag '{}'{} ({} --help lists its flags)", name, where, cmd);
        }
        std::vector<std::string> flags = FlagNames(*current);
        std::erase(flags, "--help");  // takes no value, and --help is no typo of anything
        std::erase(flags, "-h");
        auto close = ClosestNames(name, flags);
        if (close.empty()) return "";
        for (auto& c : close) {
          if (name.size() < word.size()) c += word.substr(name.size());  // keep "=value"
        }
        return Hint("flag", name, where, close, argc, argv, i);
      }
      const bool takes_value = opt->get_items_expected_max() > 0;
      if (takes_value && word.find('=') == std::string::npos && (word.starts_with("--") || word.size() == 2)) ++i;
      continue;
    }
    if (CLI::App* sub = FindSubcommand(*current, word)) {
      current = sub;
      continue;
    }
    // A word that is no subcommand: wrong where the command expects one.
    const bool wants_subcommand = !SubcommandNames(*current).empty() &&
                                  current->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
    if (!wants_subcommand) continue;  // a positional argument of the command
    auto close = ClosestNames(word, SubcommandNames(*current));
    if (close.empty()) {
      // Nothing close: still say which word is wrong, not CLI11's "A subcommand is required".
      const std::string cmd = CommandPath(*current);  // "cohort token"
      return fmt::format("unknown command '{}'{} ({} --help lists them)", word,
                         current == &app ? "" : " of " + cmd, cmd);
    }
    return Hint("command", word, "", close, argc, argv, i);
  }
  return "";
}

}  // namespace cohort::cli
