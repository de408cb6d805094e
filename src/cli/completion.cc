// `cohort completion bash|zsh`: a shell completion script generated from the CLI's own
// definition (every subcommand, alias and flag CLI11 knows), so it never falls behind the
// commands. Install: `source <(cohort completion bash)` in ~/.bashrc, or
// `cohort completion zsh > "${fpath[1]}/_cohort"`.
//
// Both scripts complete the command path (cohort node rm), then a subcommand or a flag of
// the command reached; after "--" (submit's command) and where a command takes no more
// words, the shell's own file completion applies.
#include <functional>

#include "cli/client.h"
#include "cli/suggest.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

// Visits `app` and every subcommand below it with its path ("" for the root, "node rm").
void Walk(CLI::App& app, const std::string& path, const std::function<void(CLI::App&, const std::string&)>& f) {
  f(app, path);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    Walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), f);
  }
}

// The two shell functions both scripts share: __cohort_children PATH and __cohort_flags
// PATH print the words that may follow PATH.
std::string CaseFunctions(CLI::App& root) {
  std::string children = "__cohort_children() {\n  case \"$1\" in\n";
  std::string flags = "__cohort_flags() {\n  case \"$1\" in\n";
  Walk(root, "", [&](CLI::App& app, const std::string& path) {
    std::vector<std::string> names = SubcommandNames(app);
    if (!names.empty()) children += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, Join(names, " ", ""));
    std::vector<std::string> f = FlagNames(app);
    flags += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, Join(f, " ", ""));
    // An alias reaches the same flags.
    for (const auto& alias : app.get_aliases()) {
      std::string parent = path.substr(0, path.rfind(' ') == std::string::npos ? 0 : path.rfind(' '));
      std::string alias_path = parent.empty() ? alias : parent + " " + alias;
      flags += fmt::format("    \"{}\") echo \"{}\" ;;\n", alias_path, Join(f, " ", ""));
    }
  });
  children += "  esac\n}\n";
  flags += "  esac\n}\n";
  return children + flags;
}

constexpr char kBashMain[] = R"SH(_cohort() {
  local cur="${COMP_WORDS[COMP_CWORD]}" cmdpath="" w i kids
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    [[ "$w" == "--" ]] && return 0
    [[ "$w" == -* ]] && continue
    kids=" $(__cohort_children "$cmdpath") "
    [[ "$kids" == *" $w "* ]] && cmdpath="${cmdpath:+$cmdpath }$w"
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(__cohort_flags "$cmdpath")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(__cohort_children "$cmdpath")" -- "$cur"))
  fi
}
complete -o default -F _cohort cohort
)SH";

constexpr char kZshMain[] = R"SH(_cohort() {
  local cmdpath="" w i kids
  for ((i = 2; i < CURRENT; i++)); do
    w="${words[i]}"
    if [[ "$w" == "--" ]]; then _files; return; fi
    [[ "$w" == -* ]] && continue
    kids=" $(__cohort_children "$cmdpath") "
    [[ "$kids" == *" $w "* ]] && cmdpath="${cmdpath:+$cmdpath }$w"
  done
  if [[ "${words[CURRENT]}" == -* ]]; then
    compadd -- ${=$(__cohort_flags "$cmdpath")}
  else
    kids="$(__cohort_children "$cmdpath")"
    if [[ -n "$kids" ]]; then compadd -- ${=kids}; else _files; fi
  fi
}
if [[ "$funcstack[1]" == "_cohort" ]]; then _cohort "$@"; else compdef _cohort cohort; fi
)SH";

}  // namespace

Result<std::string> CompletionScript(CLI::App& root, std::string_view shell) {
  if (shell == "bash") return "# bash completion for cohort (cohort completion bash)\n" + CaseFunctions(root) + kBashMain;
  if (shell == "zsh") return "#compdef cohort\n# zsh completion for cohort (cohort completion zsh)\n" + CaseFunctions(root) + kZshMain;
  return FieldError("SHELL", "must be bash or zsh, got '{}'", shell);
}

void AddCompletionCommand(CommandContext& ctx) {
  auto shell = std::make_shared<std::string>();
  auto* sub = ctx.app.add_subcommand(
      "completion", "Print a shell completion script: source <(cohort completion bash), or zsh into your fpath");
  sub->add_option("SHELL", *shell, "bash or zsh")->required();
  CLI::App& root = ctx.app;
  ctx.on_run(sub, [shell, &root] {
    auto script = CompletionScript(root, *shell);
    if (!script) return ReportError(script.error());
    std::fputs(script->c_str(), stdout);
    return 0;
  });
}

}  // namespace cohort::cli
