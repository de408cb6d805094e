// `cohort batch` / `cohort sbatch` (batch.h).
#include "cli/batch.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "api/job_name.h"
#include "cli/cli.h"
#include "cli/suggest.h"

namespace cohort::cli {
namespace {

// Words of a directive as a shell splits them: blanks separate, '...' keeps everything,
// "..." keeps everything but a backslash before " or \, a backslash outside quotes keeps
// the next character; an unquoted word that starts with '#' ends the line (a comment).
Result<std::vector<std::string>> SplitWords(std::string_view text, int line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
      continue;
    }
    if (c == '#' && !in_word) break;
    in_word = true;
    if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
    } else if (c == '\'' || c == '"') {
      size_t k = i + 1;
      for (; k < text.size() && text[k] != c; ++k) {
        if (c == '"' && text[k] == '\\' && k + 1 < text.size() && (text[k + 1] == '"' || text[k + 1] == '\\')) ++k;
        word += text[k];
      }
      if (k >= text.size()) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("line {}: #SBATCH{}: the quote {} is not closed", line, text, c), "script");
      }
      i = k;
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

// The script's name as a job name (sbatch names a job after its script; "sbatch" for one
// read from stdin).
std::string JobNameOf(const std::string& source) {
  std::string name = source == "<stdin>" ? "" : api::JobNameFromPath(source);
  return name.empty() ? "sbatch" : name;
}

// `word`, a flag `app` does not have: what cohort has instead where Slurm has it, else the
// closest flag.
Error UnknownFlag(const std::string& word, const CLI::App& app) {
  const std::string typed = word.substr(0, word.find('='));
  std::string why = SlurmFlagHint(typed);
  if (why.empty()) {
    auto close = typed.starts_with("--") ? ClosestNames(typed, FlagNames(app)) : std::vector<std::string>{};
    why = close.empty() ? "see cohort batch --help" : "did you mean " + close[0] + "?";
  }
  return Error{ErrorCode::kInvalidArgument, fmt::format("unknown option '{}': {}", typed, why)};
}

// `words` parsed as `cohort submit`'s flags into `st`: a later value of a flag overrides an
// earlier one (as a later #SBATCH line does). kInvalidArgument for an unknown flag (with
// what cohort has instead, where Slurm has it) or a word that is not a flag.
Result<void> ParseFlags(const std::vector<std::string>& words, SubmitState& st) {
  CLI::App app{"#SBATCH"};
  app.allow_extras();
  AddSubmitFlags(&app, st, /*slurm_tasks=*/true);
  for (CLI::Option* o : app.get_options()) {
    if (o->get_type_size_max() == 1 && o->get_expected_max() == 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  std::vector<std::string> reversed(words.rbegin(), words.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return MakeError(ErrorCode::kInvalidArgument, e.what());
  }
  const std::vector<std::string> extra = app.remaining(false);
  if (extra.empty()) return {};
  const std::string& first = extra.front();
  if (!first.starts_with('-')) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a flag (a directive holds flags only; the script's arguments go after "
                                 "its name on the command line)",
                                 first));
  }
  return std::unexpected(UnknownFlag(first, app));
}

// sbatch's --gres=gpu[:TYPE]:COUNT (or gpu alone: one) as -G's [TYPE:]COUNT, into f.gpus.
Result<void> ApplyGres(SubmitFlags& f) {
  if (!f.gres) return {};
  if (f.gpus) return MakeError(ErrorCode::kInvalidArgument, "--gres and -G/--gpus both ask for GPUs: give one");
  const std::string& g = *f.gres;
  if (g != "gpu" && !g.starts_with("gpu:")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--gres={}: cohort schedules GPUs only (gpu[:TYPE]:COUNT, e.g. gpu:h100:4)", g));
  }
  f.gpus = g == "gpu" ? "1" : g.substr(4);  // -G checks TYPE:COUNT
  f.gres.reset();
  return {};
}

// Slurm's -n/--ntasks (tasks in all) as tasks per node on `nodes` nodes; `per_node` is an
// explicit --ntasks-per-node, which must agree.
Result<int> TasksPerNode(int ntasks, int nodes, std::optional<int> per_node) {
  if (ntasks < 1) return MakeError(ErrorCode::kInvalidArgument, fmt::format("--ntasks: must be at least 1, got {}", ntasks));
  if (nodes < 1) nodes = 1;
  if (per_node && *per_node * nodes != ntasks) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--ntasks {} and --ntasks-per-node {} on {} node(s) disagree: give one", ntasks,
                                 *per_node, nodes));
  }
  if (ntasks % nodes != 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--ntasks {} cannot be spread evenly over {} nodes (cohort runs as many tasks on "
                                 "every node): give a multiple of -N, or --ntasks-per-node",
                                 ntasks, nodes));
  }
  return ntasks / nodes;
}

}  // namespace

Result<std::vector<BatchDirective>> ReadBatchDirectives(std::string_view script) {
  std::vector<BatchDirective> out;
  size_t at = script.find('\n');  // line 1 is the #! line
  for (int line = 2; at != std::string_view::npos && at + 1 < script.size(); ++line) {
    const size_t start = at + 1;
    at = script.find('\n', start);
    std::string_view text = script.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start);
    const size_t lead = text.find_first_not_of(" \t");
    if (lead == std::string_view::npos) continue;  // blank
    if (text[lead] != '#') break;                  // the first command: sbatch reads no further
    if (!text.starts_with("#SBATCH")) continue;    // a comment (## SBATCH and # SBATCH too)
    std::string_view rest = text.substr(7);
    if (!rest.empty() && rest.front() != ' ' && rest.front() != '\t') continue;  // #SBATCHX: a comment
    BatchDirective d;
    d.line = line;
    d.text = std::string(rest);
    d.words = COHORT_TRY(SplitWords(rest, line));
    if (!d.words.empty()) out.push_back(std::move(d));
  }
  return out;
}

Result<BatchSubmission> BuildBatchSubmission(const std::string& script, const std::string& source,
                                             const std::vector<std::string>& args, const SubmitState& cli) {
  const std::string in = source + ": ";
  if (!script.starts_with("#!")) {
    return MakeError(ErrorCode::kInvalidArgument,
                     in + "does not look like a batch script: its first line must start with #! and the path of an "
                          "interpreter, e.g. #!/bin/bash (to run a program, use cohort submit -- PROGRAM, or "
                          "--wrap 'COMMAND')",
                     "script");
  }
  if (script.size() > api::kMaxScriptBytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}is {} bytes; a batch script may have at most {} (keep the work in a program it "
                                 "runs)",
                                 in, script.size(), api::kMaxScriptBytes),
                     "script");
  }
  auto directives = ReadBatchDirectives(script);
  if (!directives) return std::unexpected(WithContext(directives.error(), source));
  // Each line alone first, so that an error names its line.
  const SubmitDefaults defaults = CurrentDefaults();
  std::vector<std::string> words;
  for (const BatchDirective& d : *directives) {
    SubmitState one;
    auto checked = ParseFlags(d.words, one);
    if (checked) checked = ApplyGres(one.flags);
    if (checked) {
      if (one.wrap) {
        checked = MakeError(ErrorCode::kInvalidArgument, "--wrap: the script itself is what runs");
      } else if (auto merged = MergeSubmitFlags(json::object(), one.flags, defaults); !merged) {
        checked = std::unexpected(merged.error());
      }
    }
    if (!checked) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}:{}: #SBATCH{}: {} (edit the line, or make it ##SBATCH to have it skipped)",
                                   source, d.line, d.text, checked.error().message),
                       "script");
    }
    words.insert(words.end(), d.words.begin(), d.words.end());
  }
  SubmitState from_script;
  COHORT_TRY_VOID(ParseFlags(words, from_script));
  if (auto g = ApplyGres(from_script.flags); !g) return std::unexpected(WithContext(g.error(), source + "'s #SBATCH lines"));
  SubmitFlags flags = cli.flags;
  COHORT_TRY_VOID(ApplyGres(flags));

  json base = json::object();
  if (!words.empty()) {
    auto merged = MergeSubmitFlags(json::object(), from_script.flags, defaults);
    if (!merged) return std::unexpected(WithContext(merged.error(), source + "'s #SBATCH lines"));
    base = std::move(*merged);
  }
  if (std::optional<int> ntasks = flags.ntasks ? flags.ntasks : from_script.flags.ntasks) {
    // On the nodes the job gets (the command line's -N over the script's), with the
    // --ntasks-per-node given beside it.
    const int nodes = flags.nodes.value_or(base.value("nodes", 1));
    std::optional<int> per_node = flags.tasks_per_node;
    if (!per_node && !flags.ntasks && base.contains("tasks_per_node")) per_node = base["tasks_per_node"].get<int>();
    auto per = TasksPerNode(*ntasks, nodes, per_node);
    if (!per) return std::unexpected(WithContext(per.error(), source));
    base["tasks_per_node"] = *per;
    flags.tasks_per_node.reset();
  }
  base["kind"] = "allocation";
  base["script"] = script;
  base["command"] = args;
  if (!base.contains("name") && !flags.name) base["name"] = JobNameOf(source);
  const bool output_given = base.contains("output") || base.contains("error") || flags.output || flags.error;
  if (!output_given) {
    // sbatch's default, in the working directory.
    const bool array = base.contains("array") || flags.array;
    base["output"] = array ? "slurm-%A_%a.out" : "slurm-%j.out";
  }
  BatchSubmission out;
  out.user_named = cli.flags.user.has_value() || from_script.flags.user.has_value();
  auto spec = BuildSubmitSpec(std::move(base), flags, words.empty() ? source : source + "'s #SBATCH lines");
  if (!spec) return std::unexpected(spec.error());
  out.spec = std::move(*spec);
  out.state = cli;
  out.state.hold = cli.hold || from_script.hold;
  out.state.parsable = cli.parsable || from_script.parsable;
  out.state.wait = cli.wait || from_script.wait;
  out.state.dry_run = cli.dry_run || from_script.dry_run;
  return out;
}

namespace {

// The script's text: the file's, or standard input's for "-" (or no SCRIPT when stdin is
// not a terminal, as sbatch reads it). One byte over the limit is read to tell it is over.
Result<std::string> ReadScript(const std::string& path) {
  std::string text;
  if (path == "-") {
    char buf[65536];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      text.append(buf, n);
      if (text.size() > api::kMaxScriptBytes) break;
    }
    return text;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("cannot read the batch script '{}': {}", path,
                                                              std::strerror(errno)));
  }
  text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return text;
}

}  // namespace

void AddBatchCommand(CommandContext& ctx) {
  auto st = std::make_shared<SubmitState>();
  auto* sub = ctx.app.add_subcommand(
      "batch",
      "Submit a batch script, like sbatch: cohort batch [flags] SCRIPT [ARGS...] (or the script on stdin); its "
      "#SBATCH lines give flags, the command line overrides them; the script runs once, on the first node, and "
      "runs its parallel work as steps with cohort run (srun)");
  sub->alias("sbatch");
  sub->prefix_command();  // SCRIPT and everything after it are the script's
  sub->footer(
      "SCRIPT: the script's file (- or none: standard input); it is sent with the job, so editing it afterwards "
      "changes nothing. ARGS: its arguments. The job holds -N nodes with -n tasks in all (or --ntasks-per-node; -G "
      "GPUs per node) for the script's steps, and is named after the script unless -J names it; without -o/-e its output goes to slurm-%j.out in the working directory. Slurm's srun in a "
      "script is cohort run: cohort run -- python3 train.py runs on every task of the job.");
  AddSubmitFlags(sub, *st, /*slurm_tasks=*/true);
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [st, sub, &global] {
    std::vector<std::string> rest = sub->remaining(false);
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (!rest.empty() && rest.front().starts_with('-') && rest.front() != "-") {
      return ReportError(UnknownFlag(rest.front(), *sub));
    }
    std::string path = rest.empty() ? "" : rest.front();
    std::vector<std::string> args(rest.empty() ? rest.end() : rest.begin() + 1, rest.end());
    std::string script;
    if (st->wrap) {
      if (!path.empty() || st->wrap->empty()) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                     st->wrap->empty() ? "--wrap: give the command line to run"
                                                       : "--wrap and a script: give one of them")
                               .error());
      }
      script = "#!/bin/sh\n" + *st->wrap + "\n";  // as sbatch --wrap writes it
      path = "wrap";
    } else {
      if (path.empty() && isatty(0)) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                     "give the batch script: cohort batch [flags] job.sh [ARGS...] (or pipe it in, "
                                     "or --wrap 'COMMAND')")
                               .error());
      }
      if (path.empty()) path = "-";
      auto text = ReadScript(path);
      if (!text) return ReportError(text.error());
      script = std::move(*text);
    }
    auto built = BuildBatchSubmission(script, path == "-" ? "<stdin>" : path, args, *st);
    if (!built) return ReportError(built.error());
    return SubmitBuiltSpec(built->spec, built->user_named, built->state, global, "batch job");
  });
}

}  // namespace cohort::cli
