#include "sched/constraints.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "sched/reasons.h"

namespace cohort::sched {

namespace {

bool FeatureChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-';
}

bool HostChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

std::string_view Plural(int64_t n, std::string_view one, std::string_view many) { return n == 1 ? one : many; }

// Splits on commas outside brackets.
std::vector<std::string_view> SplitTop(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']') --depth;
    if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

std::optional<int64_t> Number(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

Result<std::vector<std::string>> ExpandHostList(std::string_view text, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("{} '{}': {}", flag, text, why));
  };
  std::vector<std::string> out;
  std::set<std::string, std::less<>> seen;
  auto add = [&](std::string name) -> Result<void> {
    if (name.empty() || name.size() > 64) return bad("a host name must be 1-64 characters");
    if (!std::all_of(name.begin(), name.end(), HostChar)) {
      return bad(fmt::format("'{}' is not a host name (letters, digits, '.', '_', '-')", name));
    }
    if (out.size() >= kMaxHostListNames) return bad(fmt::format("more than {} names", kMaxHostListNames));
    if (seen.insert(name).second) out.push_back(std::move(name));
    return {};
  };
  if (text.empty()) return bad("the host list is empty");
  for (std::string_view part : SplitTop(text)) {
    if (part.empty()) return bad("an empty name between commas");
    const size_t open = part.find('[');
    if (open == std::string_view::npos) {
      if (part.find(']') != std::string_view::npos) return bad("']' without '['");
      COHORT_TRY_VOID(add(std::string(part)));
      continue;
    }
    const size_t close = part.find(']', open);
    if (close == std::string_view::npos) return bad("'[' without ']'");
    if (part.find('[', open + 1) != std::string_view::npos) return bad("one bracketed range per name");
    const std::string_view prefix = part.substr(0, open);
    const std::string_view suffix = part.substr(close + 1);
    const std::string_view inner = part.substr(open + 1, close - open - 1);
    if (inner.empty()) return bad("empty brackets");
    size_t start = 0;
    while (start <= inner.size()) {
      size_t comma = inner.find(',', start);
      if (comma == std::string_view::npos) comma = inner.size();
      const std::string_view item = inner.substr(start, comma - start);
      const size_t dash = item.find('-');
      const std::string_view lo_text = item.substr(0, dash);
      const std::string_view hi_text = dash == std::string_view::npos ? item : item.substr(dash + 1);
      const auto lo = Number(lo_text);
      const auto hi = Number(hi_text);
      if (!lo || !hi) return bad(fmt::format("'{}' is not a number or a range like 1-4", item));
      if (*hi < *lo) return bad(fmt::format("range '{}' runs backwards", item));
      if (static_cast<uint64_t>(*hi - *lo) >= kMaxHostListNames) {
        return bad(fmt::format("more than {} names", kMaxHostListNames));
      }
      const size_t width = lo_text.size() > 1 && lo_text[0] == '0' ? lo_text.size() : 0;
      for (int64_t v = *lo; v <= *hi; ++v) {
        COHORT_TRY_VOID(add(fmt::format("{}{:0{}}{}", prefix, v, width, suffix)));
      }
      start = comma + 1;
    }
  }
  return out;
}

Result<int64_t> ParseMemoryMb(std::string_view text, std::string_view flag) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: '{}' is not a memory size; use MiB or a K/M/G/T suffix (512, 1500M, 64G, 1T)",
                                 flag, text));
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const auto value = Number(text.substr(0, digits));
  if (!value) return bad();
  std::string unit(text.substr(digits));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.pop_back();
  int64_t mb = 0;
  if (unit == "K") {
    mb = (*value + 1023) / 1024;
  } else if (unit.empty() || unit == "M") {
    mb = *value;
  } else if (unit == "G") {
    mb = *value * 1024;
  } else if (unit == "T") {
    mb = *value * 1024 * 1024;
  } else {
    return bad();
  }
  if (mb > kMaxMemoryMb) return bad();
  return mb;
}

std::string FormatMemoryMb(int64_t mb) {
  if (mb >= 1024 * 1024 && mb % (1024 * 1024) == 0) return fmt::format("{}T", mb / (1024 * 1024));
  if (mb >= 1024 && mb % 1024 == 0) return fmt::format("{}G", mb / 1024);
  return fmt::format("{}M", mb);
}

// ---- FeatureExpr: a recursive-descent parser into a postfix program ----

namespace {

class ExprParser {
 public:
  explicit ExprParser(std::string_view text) : text_(text) {}

  Result<void> Run(std::vector<std::string>& names, std::vector<int>& program) {
    names_ = &names;
    program_ = &program;
    COHORT_TRY_VOID(Or());
    Skip();
    if (pos_ < text_.size()) return Bad(fmt::format("unexpected '{}'", text_[pos_]));
    return {};
  }

 private:
  void Skip() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  std::unexpected<Error> Bad(std::string why) const {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--constraint '{}': {} at offset {}", text_, why, pos_));
  }
  Result<void> Or() {
    COHORT_TRY_VOID(And());
    for (Skip(); pos_ < text_.size() && text_[pos_] == '|'; Skip()) {
      ++pos_;
      COHORT_TRY_VOID(And("'|'"));
      program_->push_back(-2);
    }
    return {};
  }
  Result<void> And(std::string_view after = {}) {
    COHORT_TRY_VOID(Atom(after));
    for (Skip(); pos_ < text_.size() && text_[pos_] == '&'; Skip()) {
      ++pos_;
      COHORT_TRY_VOID(Atom("'&'"));
      program_->push_back(-1);
    }
    return {};
  }
  Result<void> Atom(std::string_view after) {
    Skip();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      if (++depth_ > 32) return Bad("parentheses nest too deep");
      ++pos_;
      COHORT_TRY_VOID(Or());
      Skip();
      if (pos_ >= text_.size() || text_[pos_] != ')') return Bad("'(' without ')'");
      ++pos_;
      --depth_;
      return {};
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && FeatureChar(text_[pos_])) ++pos_;
    if (pos_ == start) {
      return Bad(after.empty() ? std::string("a feature name is missing")
                               : fmt::format("a feature name is missing after {}", after));
    }
    if (pos_ - start > 63) return Bad("a feature name is longer than 63 characters");
    std::string name(text_.substr(start, pos_ - start));
    auto it = std::find(names_->begin(), names_->end(), name);
    if (it == names_->end()) it = names_->insert(names_->end(), std::move(name));
    program_->push_back(static_cast<int>(it - names_->begin()));
    return {};
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<std::string>* names_ = nullptr;
  std::vector<int>* program_ = nullptr;
};

}  // namespace

Result<FeatureExpr> FeatureExpr::Parse(std::string_view text) {
  if (text.size() > 1024) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--constraint: {} characters; at most 1024", text.size()));
  }
  FeatureExpr e;
  e.text_ = std::string(text);
  COHORT_TRY_VOID(ExprParser(text).Run(e.names_, e.program_));
  return e;
}

bool FeatureExpr::Matches(std::span<const std::string> features) const {
  std::vector<bool> has(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    has[i] = std::find(features.begin(), features.end(), names_[i]) != features.end();
  }
  std::vector<bool> stack;
  for (int op : program_) {
    if (op >= 0) {
      stack.push_back(has[static_cast<size_t>(op)]);
      continue;
    }
    const bool b = stack.back();
    stack.pop_back();
    stack.back() = op == kAnd ? (stack.back() && b) : (stack.back() || b);
  }
  return !stack.empty() && stack.back();
}

bool IsConstrained(const JobRequest& job) {
  return !job.nodelist.empty() || !job.exclude.empty() || !job.constraint.empty() || job.mem_per_node_mb > 0;
}

// ---- A request's constraints, parsed once per use ----

struct ConstraintFilter {
  std::vector<std::string> nodelist;
  std::set<std::string, std::less<>> exclude;
  std::optional<FeatureExpr> features;
  int64_t mem_mb = 0;

  static Result<ConstraintFilter> Of(const JobRequest& job) {
    ConstraintFilter f;
    if (!job.nodelist.empty()) f.nodelist = COHORT_TRY(ExpandHostList(job.nodelist, "--nodelist"));
    if (!job.exclude.empty()) {
      for (std::string& n : COHORT_TRY(ExpandHostList(job.exclude, "--exclude"))) f.exclude.insert(std::move(n));
    }
    if (!job.constraint.empty()) f.features = COHORT_TRY(FeatureExpr::Parse(job.constraint));
    f.mem_mb = job.mem_per_node_mb;
    return f;
  }
  bool Listed(std::string_view id) const {
    return std::find(nodelist.begin(), nodelist.end(), id) != nodelist.end();
  }
  bool Allows(const std::string& id, std::span<const std::string> node_features) const {
    if (exclude.contains(id)) return false;
    return !features || features->Matches(node_features);
  }
};

Result<void> CheckConstraintSyntax(const JobRequest& job) {
  auto f = COHORT_TRY(ConstraintFilter::Of(job));
  if (job.mem_per_node_mb < 0 || job.mem_per_node_mb > kMaxMemoryMb) {
    return Errorf(ErrorCode::kInvalidArgument, "--mem: must be 0 to {} MiB, got {}", kMaxMemoryMb,
                  job.mem_per_node_mb);
  }
  if (static_cast<int64_t>(f.nodelist.size()) > job.nodes) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "--nodelist names {} nodes but the job has {} (--nodes); every listed node is a member", f.nodelist.size(),
                  job.nodes);
  }
  for (const std::string& n : f.nodelist) {
    if (f.exclude.contains(n)) {
      return Errorf(ErrorCode::kInvalidArgument, "--nodelist and --exclude both name {}", n);
    }
  }
  return {};
}

Result<void> CheckConstraintsFeasible(std::span<const NodeCapacity> capacity, const JobRequest& job) {
  const auto f = COHORT_TRY(ConstraintFilter::Of(job));
  const GangDemand d = COHORT_TRY(DemandOf(job));
  const int need = job.min_nodes > 0 ? std::min(job.min_nodes, d.nodes) : d.nodes;
  auto shape_ok = [&](const NodeCapacity& n) { return n.gpus >= d.gpus && n.cpus >= d.cpus; };
  for (const std::string& name : f.nodelist) {
    auto it = std::find_if(capacity.begin(), capacity.end(), [&](const NodeCapacity& n) { return n.id == name; });
    if (it == capacity.end()) {
      return Errorf(ErrorCode::kUnsatisfiable, "--nodelist names {}, which is not in the cluster", name);
    }
    if (!f.Allows(it->id, it->features)) {
      return Errorf(ErrorCode::kUnsatisfiable, "--nodelist names {}, whose features ({}) do not match --constraint '{}'",
                    name, it->features.empty() ? std::string("none") : fmt::format("{}", fmt::join(it->features, ", ")),
                    job.constraint);
    }
    if (!shape_ok(*it)) {
      return Errorf(ErrorCode::kUnsatisfiable, "--nodelist names {}, which has {} GPUs and {} CPUs; the job needs {} and {} per node",
                    name, it->gpus, it->cpus, d.gpus, d.cpus);
    }
    if (it->memory_mb < f.mem_mb) {
      return Errorf(ErrorCode::kUnsatisfiable, "--mem {} per node, but --nodelist names {}, which has {}",
                    FormatMemoryMb(f.mem_mb), name, FormatMemoryMb(it->memory_mb));
    }
  }
  int allowed = 0, shaped = 0, fits = 0;
  int64_t max_mem = 0;
  std::set<std::string> all_features;
  for (const NodeCapacity& n : capacity) {
    all_features.insert(n.features.begin(), n.features.end());
    if (!f.Allows(n.id, n.features)) continue;
    ++allowed;
    if (!shape_ok(n)) continue;
    ++shaped;
    max_mem = std::max(max_mem, n.memory_mb);
    if (n.memory_mb >= f.mem_mb) ++fits;
  }
  if (fits >= need) return {};
  const std::string what = !f.features ? std::string("--exclude")
                           : f.exclude.empty() ? fmt::format("--constraint '{}'", job.constraint)
                                               : fmt::format("--constraint '{}' and --exclude", job.constraint);
  if (allowed == 0) {
    if (f.features && f.exclude.empty()) {
      return Errorf(ErrorCode::kUnsatisfiable, "--constraint '{}' matches no node (features in the cluster: {})",
                    job.constraint, all_features.empty() ? std::string("none") : fmt::format("{}", fmt::join(all_features, ", ")));
    }
    return Errorf(ErrorCode::kUnsatisfiable, "{} leave no node of the {} in the cluster", what, capacity.size());
  }
  if (shaped < need) {
    return Errorf(ErrorCode::kUnsatisfiable, "job needs {} {} with {} {} and {} {} each, but {} {} {} {} that {} them",
                  need, Plural(need, "node", "nodes"), d.gpus, Plural(d.gpus, "GPU", "GPUs"), d.cpus,
                  Plural(d.cpus, "CPU", "CPUs"), what, "leaves", shaped,
                  Plural(shaped, "node", "nodes"), shaped == 1 ? "has" : "have");
  }
  return Errorf(ErrorCode::kUnsatisfiable, "--mem {} per node on {} {}, but {} eligible {} that much (the largest has {})",
                FormatMemoryMb(f.mem_mb), need, Plural(need, "node", "nodes"), fits == 0 ? "no" : std::to_string(fits),
                fits <= 1 ? "node has" : "nodes have", FormatMemoryMb(max_mem));
}

// ---- ConstraintBook ----

ConstraintBook::ConstraintBook(std::span<const NodeView> nodes) : nodes_(nodes) {
  free_mb_.reserve(nodes.size());
  index_.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    free_mb_.push_back(nodes[i].free_memory_mb);
    index_.emplace(nodes[i].id, static_cast<int>(i));
  }
}

void ConstraintBook::Take(int node, int64_t mb) {
  if (mb > 0) free_mb_[static_cast<size_t>(node)] -= mb;
}

bool ConstraintBook::Eligible(const NodePool& pool, int node, const ConstraintFilter& f, const GangDemand& d) const {
  const NodeView& v = nodes_[static_cast<size_t>(node)];
  return pool.CanHost(node, d.gpus, d.cpus) && free_mb_[static_cast<size_t>(node)] >= f.mem_mb &&
         f.Allows(v.id, v.features);
}

std::optional<ConstraintBook::Rules> ConstraintBook::RulesFor(const JobRequest& job) const {
  const auto f = ConstraintFilter::Of(job);
  if (!f) return std::nullopt;
  Rules rules;
  rules.mem_mb = f->mem_mb;
  rules.allowed.reserve(nodes_.size());
  for (const NodeView& v : nodes_) rules.allowed.push_back(f->Allows(v.id, v.features));
  for (const std::string& name : f->nodelist) {
    auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    rules.listed.push_back(it->second);
  }
  return rules;
}

std::optional<GangFit> ConstraintBook::Fit(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                                           std::span<const int> blocked) const {
  const auto f = ConstraintFilter::Of(job);
  if (!f || static_cast<int>(f->nodelist.size()) > demand.nodes) return std::nullopt;
  auto is_blocked = [&](int n) { return std::find(blocked.begin(), blocked.end(), n) != blocked.end(); };
  GangFit fit;
  for (const std::string& name : f->nodelist) {
    auto it = index_.find(name);
    if (it == index_.end() || is_blocked(it->second) || !Eligible(pool, it->second, *f, demand)) return std::nullopt;
    fit.nodes.push_back(it->second);
  }
  if (static_cast<int>(fit.nodes.size()) < demand.nodes) {
    pool.VisitHosts(demand.gpus, demand.cpus, job.placement, [&](int node) {
      const NodeView& v = nodes_[static_cast<size_t>(node)];
      if (!is_blocked(node) && !f->Listed(v.id) && free_mb_[static_cast<size_t>(node)] >= f->mem_mb &&
          f->Allows(v.id, v.features)) {
        fit.nodes.push_back(node);
      }
      return static_cast<int>(fit.nodes.size()) < demand.nodes;
    });
  }
  if (static_cast<int>(fit.nodes.size()) < demand.nodes) return std::nullopt;
  for (int node : fit.nodes) fit.gpus.push_back(ChooseGpus(pool.free_gpus(node), demand.gpus, job.placement));
  return fit;
}

int ConstraintBook::CountHosts(const NodePool& pool, const JobRequest& job, const GangDemand& demand) const {
  const auto f = ConstraintFilter::Of(job);
  if (!f) return 0;
  int count = 0;
  pool.VisitHosts(demand.gpus, demand.cpus, job.placement, [&](int node) {
    if (Eligible(pool, node, *f, demand)) ++count;
    return true;
  });
  return count;
}

std::string ConstraintBook::Reason(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                                   std::string_view unavailable_suffix) const {
  const auto f = ConstraintFilter::Of(job);
  if (!f) return InvalidReason(f.error().message);
  // Stages over the schedulable nodes: allowed by --exclude/--constraint, with the memory
  // at all, then free now (GPUs, CPUs and unreserved memory).
  int schedulable = 0, allowed = 0, with_memory = 0, free_resources = 0, available = 0;
  int64_t most_free_mb = 0;
  for (int node = 0; node < pool.size(); ++node) {
    if (!pool.schedulable(node)) continue;
    ++schedulable;
    const NodeView& v = nodes_[static_cast<size_t>(node)];
    if (!f->Allows(v.id, v.features)) continue;
    ++allowed;
    if (v.memory_mb < f->mem_mb) continue;
    ++with_memory;
    if (!pool.CanHost(node, demand.gpus, demand.cpus)) continue;
    ++free_resources;
    most_free_mb = std::max(most_free_mb, free_mb_[static_cast<size_t>(node)]);
    if (free_mb_[static_cast<size_t>(node)] >= f->mem_mb) ++available;
  }
  std::string out = ResourceReason(demand, available, available, "");
  if (f->mem_mb > 0) {
    // "needs 2 nodes with 4 free GPUs; ..." gains the memory before the count.
    const size_t semi = out.find(';');
    out.insert(semi, fmt::format("{} {} free memory", demand.gpus > 0 || demand.cpus > 0 ? " and" : " with",
                                 FormatMemoryMb(f->mem_mb)));
  }
  out += unavailable_suffix;
  // --nodelist: name the listed nodes that cannot take their member now.
  std::vector<std::string> listed;
  for (const std::string& name : f->nodelist) {
    auto it = index_.find(name);
    if (it == index_.end()) {
      listed.push_back(name + " has not registered");
      continue;
    }
    const int node = it->second;
    const NodeView& v = nodes_[static_cast<size_t>(node)];
    if (!v.unavailable.empty()) {
      listed.push_back(fmt::format("{} is {}", name, v.unavailable));
    } else if (!pool.CanHost(node, demand.gpus, demand.cpus)) {
      listed.push_back(fmt::format("{} has {} free GPUs and {} free CPUs", name, pool.free_gpus(node).size(),
                                   pool.free_cpus(node)));
    } else if (free_mb_[static_cast<size_t>(node)] < f->mem_mb) {
      listed.push_back(fmt::format("{} has {} free memory", name, FormatMemoryMb(std::max<int64_t>(free_mb_[static_cast<size_t>(node)], 0))));
    }
  }
  if (!listed.empty()) return out + "; --nodelist: " + fmt::format("{}", fmt::join(listed, ", "));
  const int need = demand.nodes;
  // The nodes --constraint and --exclude leave, whenever they leave out some.
  if (allowed < schedulable && (f->features || !f->exclude.empty())) {
    const std::string what = f->features ? fmt::format("--constraint '{}'", job.constraint) : std::string("--exclude");
    out += fmt::format("; {}{} {} {} of {} schedulable {}", what, f->features && !f->exclude.empty() ? " with --exclude" : "",
                       f->features ? "matches" : "leaves", allowed, schedulable, Plural(schedulable, "node", "nodes"));
    if (allowed < need) return out;
  }
  if (f->mem_mb > 0 && with_memory < need) {
    return out + fmt::format("; --mem {}: {} of {} eligible {} that much memory", FormatMemoryMb(f->mem_mb), with_memory,
                             allowed, Plural(allowed, "node has", "nodes have"));
  }
  if (f->mem_mb > 0 && free_resources >= need && available < need) {
    return out + fmt::format("; --mem {}: the nodes with the free GPUs and CPUs have {} unreserved at most",
                             FormatMemoryMb(f->mem_mb), FormatMemoryMb(std::max<int64_t>(most_free_mb, 0)));
  }
  return out;
}

}  // namespace cohort::sched
