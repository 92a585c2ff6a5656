// ptd-reweight: builds the .ptd an exported program expects from a
// safetensors checkpoint (a file, or a sharded checkpoint's index), without
// re-exporting: each weight's tensor is looked up by fqn (after --rename),
// checked against the manifest's dtype and shape, and scattered into its
// storage by the view's strides and offset. docs/SPEC.md section 7 (S8-S10).
//
// Exit codes: 0 written, 1 a rule is broken (nothing written), 2 usage
// error, unreadable input or a write that failed (nothing written).
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "ptd/checkpoint.h"
#include "ptd/verify.h"
#include "runtime/internal/strings.h"
#include "runtime/verify/verify_json.h"
#include "verifier/checkpoint_cli.h"
#include "verifier/cli_util.h"

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

namespace {

using json = nlohmann::ordered_json;

json ResultJson(const std::string& out, const ptd::ReweightResult& r) {
  json zero = json::array();
  for (const ptd::ZeroFill& z : r.zero_filled) {
    zero.push_back(json{{"key", z.key}, {"offset", z.offset}, {"nbytes", z.nbytes}});
  }
  json warnings = json::array();
  for (const ptd::Diagnostic& d : r.report.warnings()) warnings.push_back(ptd::DiagnosticJson(d));
  return json{{"ok", true},
              {"out", out},
              {"written", r.written},
              {"kept", r.kept},
              {"unused", r.unused},
              {"zero_filled_bytes", r.zero_filled_bytes},
              {"zero_filled", std::move(zero)},
              {"warnings", std::move(warnings)}};
}

std::string ResultText(const std::string& out, const ptd::ReweightResult& r) {
  std::string text = absl::StrCat(
      "wrote ", out, ": ", ptd::internal::Plural(r.written.size(), "weight", "weights"),
      " from the checkpoint",
      r.kept.empty() ? "" : absl::StrCat(", ", r.kept.size(), " kept from the base"), "\n");
  for (const ptd::Diagnostic& d : r.report.warnings()) {
    absl::StrAppend(&text, "warning: ", d.message, "\n");
  }
  return text;
}

// "FROM=TO" -> {FROM, TO}; false without '='.
bool ParseRename(const std::string& text, std::pair<std::string, std::string>* out) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return false;
  *out = {text.substr(0, eq), text.substr(eq + 1)};
  return true;
}

// A JSON object of prefix -> prefix, appended to `rename`.
absl::Status ReadRenameMap(const std::string& path,
                           std::vector<std::pair<std::string, std::string>>* rename) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the rename map"));
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a rename map is one JSON object of prefix to prefix"));
  }
  for (const auto& [from, to] : j.items()) {
    if (!to.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the rename of \"", from, "\" is not a string"));
    }
    rename->emplace_back(from, to.get<std::string>());
  }
  return absl::OkStatus();
}

// What the command line asks for.
struct Args {
  std::string checkpoint;
  ptd::BundlePaths program;
  std::string out;
  std::optional<std::string> base;
  std::vector<std::string> renames;  // "FROM=TO", checked when parsed.
  std::string rename_map;
  std::string strip_prefix;
  std::string add_prefix;
  bool json_out = false;
};

// Parses the command line into `args`; nullopt to go on, else the exit code
// (help, version, a usage error).
std::optional<int> Parse(int argc, char** argv, Args* args) {
  std::string base;

  CLI::App app(
      "Builds the .ptd that an exported program (--manifest or --pte) expects from a "
      "safetensors checkpoint (a .safetensors file or a *.safetensors.index.json): each "
      "weight's tensor, found by fqn, must have the manifest's dtype and shape (S8); views "
      "that share bytes must agree (S9); a weight the checkpoint lacks needs --base (S10). "
      "The new file is verified under every rule before it replaces anything.\n"
      "Exit codes: 0 written, 1 a rule is broken, 2 usage error, unreadable input or a "
      "failed write. Nothing is written unless everything succeeds.",
      "ptd-reweight");
  ptd::cli::SetUp(app, PTD_VERSION);
  app.add_option("checkpoint", args->checkpoint,
                 "a .safetensors file, or a sharded checkpoint's *.safetensors.index.json")
      ->required()
      ->type_name("CHECKPOINT");
  auto* manifest =
      app.add_option("--manifest", "the program's standalone manifest")->type_name("FILE");
  auto* pte = app.add_option("--pte", "the program (.pte) whose CUDA delegates carry manifests")
                  ->type_name("FILE");
  app.add_option("-o,--out", args->out, "the .ptd to write")->required()->type_name("FILE.ptd");
  auto* base_opt =
      app.add_option(
             "--base", base,
             "a .ptd for the same program: supplies the storages of weights the checkpoint lacks "
             "(kept, and listed) and the bytes no view covers (else zero)")
          ->type_name("FILE.ptd");
  app.add_option("--rename", args->renames,
                 "rename checkpoint tensors before lookup: a name starting with FROM gets TO "
                 "instead (the longest FROM wins; repeatable)")
      ->type_name("FROM=TO")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            std::pair<std::string, std::string> r;
            return ParseRename(v, &r) ? std::string() : "FROM=TO (either may be empty)";
          },
          ""));
  app.add_option("--rename-map", args->rename_map, "a JSON object of FROM to TO prefixes")
      ->type_name("FILE.json");
  app.add_option("--strip-prefix", args->strip_prefix, "the same as --rename PREFIX=")
      ->type_name("PREFIX");
  app.add_option("--add-prefix", args->add_prefix, "the same as --rename =PREFIX")
      ->type_name("PREFIX");
  app.add_flag("--json", args->json_out, "print one JSON object on stdout");

  if (const std::optional<int> rc = ptd::cli::ParseCommandLine(app, argc, argv)) return rc;
  if (manifest->empty() && pte->empty() && base_opt->empty()) {
    std::cerr << "ptd-reweight: give the program (--manifest or --pte), or --base to replace "
                 "a .ptd's keys by name\nRun with --help for more information.\n";
    return 2;
  }
  if (!manifest->empty()) args->program.manifest = manifest->as<std::string>();
  if (!pte->empty()) args->program.pte = pte->as<std::string>();
  if (!base_opt->empty()) args->base = base;
  return std::nullopt;
}

// The renames in the order given: each --rename, the --rename-map's, then
// --strip-prefix and --add-prefix. Fails only for a rename map that cannot
// be read.
absl::Status Renames(const Args& a, std::vector<std::pair<std::string, std::string>>* rename) {
  for (const std::string& r : a.renames) {
    std::pair<std::string, std::string> pair;
    (void)ParseRename(r, &pair);  // Checked when parsed.
    rename->push_back(std::move(pair));
  }
  if (!a.rename_map.empty()) {
    if (absl::Status s = ReadRenameMap(a.rename_map, rename); !s.ok()) return s;
  }
  if (!a.strip_prefix.empty()) rename->emplace_back(a.strip_prefix, "");
  if (!a.add_prefix.empty()) rename->emplace_back("", a.add_prefix);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Args args;
  if (const std::optional<int> rc = Parse(argc, argv, &args)) return *rc;
  ptd::ReweightOptions options;
  options.base = args.base;
  if (absl::Status s = Renames(args, &options.rename); !s.ok()) {
    return ptd::cli::ReportFailure("ptd-reweight", s, args.json_out);
  }
  const absl::StatusOr<ptd::ReweightResult> result =
      ptd::Reweight(args.checkpoint, args.program, args.out, options);
  if (!result.ok()) return ptd::cli::ReportFailure("ptd-reweight", result.status(), args.json_out);
  ptd::cli::WriteOut(args.json_out ? ptd::DumpJson(ResultJson(args.out, *result))
                                   : ResultText(args.out, *result));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ptd::cli::RunGuarded("ptd-reweight", [&] { return Main(argc, argv); });
}
