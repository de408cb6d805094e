#include "apps/cohort/data_plane_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "apps/cohort/data_plane_module.h"

namespace cohort {
namespace {

// Where the module may be: beside the binary (a build tree), or in the lib/cohort
// directory of the prefix the binary was installed under.
std::vector<std::string> Candidates() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {kDataPlaneModule};  // the loader's own search path
  const fs::path dir = exe.parent_path();
  return {(dir / kDataPlaneModule).string(), (dir.parent_path() / "lib" / "cohort" / kDataPlaneModule).string()};
}

}  // namespace

int RunDataPlaneCommand(const char* name, int argc, char** argv) {
  std::string reasons;
  for (const std::string& path : Candidates()) {
    if (path.find('/') != std::string::npos && access(path.c_str(), F_OK) != 0) {
      reasons += "\n  " + path + ": not there";
      continue;
    }
    // RTLD_LOCAL: the module's symbols (its own copy of src/common among them) stay its own.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      reasons += "\n  " + path + ": " + (why ? why : "cannot be loaded");
      continue;
    }
    auto entry = reinterpret_cast<DataPlaneEntryFn>(dlsym(handle, kDataPlaneEntry));
    if (!entry) {
      reasons += "\n  " + path + ": has no " + kDataPlaneEntry;
      continue;
    }
    return entry(name, argc, argv);  // the module stays loaded until the process exits
  }
  std::fprintf(stderr, "cohort: error: `cohort %s` runs in the data-plane module %s, which cannot be loaded:%s\n", name,
               kDataPlaneModule, reasons.c_str());
  return 1;
}

}  // namespace cohort
