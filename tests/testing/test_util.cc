#include "tests/testing/test_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace ptd::testing {

std::string TestPath(const char* env, const char* compiled) {
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') return v;
  const std::filesystem::path p(compiled);
  if (p.is_absolute()) return p.string();
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot read /proc/self/exe: " + ec.message());
  return (exe.parent_path() / p).lexically_normal().string();
}

std::string DataPath(const std::string& rel) {
  static const std::string* dir = new std::string(TestPath("PTD_TEST_DATA_DIR", PTD_TEST_DATA_DIR));
  return *dir + "/" + rel;
}

std::string ConformancePath(const std::string& rel) { return DataPath("conformance/" + rel); }

const nlohmann::json& ConformanceCases() {
  static const nlohmann::json* cases = [] {
    const std::string path = DataPath("conformance/cases.json");
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path + " (set PTD_TEST_DATA_DIR)");
    auto* j = new nlohmann::json(nlohmann::json::parse(in));
    return j;
  }();
  return (*cases)["cases"];
}

const nlohmann::json& ConformanceCase(const std::string& name) {
  for (const auto& tc : ConformanceCases()) {
    if (tc["name"] == name) return tc;
  }
  throw std::runtime_error("no conformance case " + name);
}

std::vector<std::string> OkConformanceCases() {
  std::vector<std::string> names;
  for (const auto& tc : ConformanceCases()) {
    if (tc["expect"] == "ok") names.push_back(tc["name"]);
  }
  return names;
}

std::vector<uint8_t> ByteVector(std::initializer_list<int> bytes) {
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

int CountEntries(const std::string& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ptd_test.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(path_, ec);
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace ptd::testing
