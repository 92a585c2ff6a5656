// ptd-extract: writes the weights of an ExecuTorch .ptd as a safetensors
// checkpoint: every stored weight's view, materialized row-major, under its
// fqn (with --manifest or --pte), or each key's bytes as a U8 tensor
// (without). docs/SPEC.md section 7.
//
// Exit codes: 0 written, 1 a rule is broken (nothing written), 2 usage
// error, unreadable input or a write that failed (nothing written).
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "ptd/checkpoint.h"
#include "ptd/scalar_type.h"
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

json StatsJson(const ptd::WeightStats& s) {
  return json{{"nan", s.nan},
              {"inf", s.inf},
              {"min", s.min ? json(*s.min) : json(nullptr)},
              {"max", s.max ? json(*s.max) : json(nullptr)}};
}

json ResultJson(const ptd::ExtractResult& r) {
  json tensors = json::array();
  for (const ptd::ExtractedTensor& t : r.tensors) {
    json one{{"name", t.name},
             {"dtype", t.scalar_type},
             {"shape", t.shape},
             {"nbytes", t.nbytes},
             {"file", t.file}};
    if (t.stats) one["stats"] = StatsJson(*t.stats);
    tensors.push_back(std::move(one));
  }
  json warnings = json::array();
  for (const ptd::Diagnostic& d : r.report.warnings()) warnings.push_back(ptd::DiagnosticJson(d));
  return json{{"ok", true},
              {"files", r.files},
              {"tensors", std::move(tensors)},
              {"runtime_owned", r.runtime_owned},
              {"warnings", std::move(warnings)}};
}

std::string ResultText(const ptd::ExtractResult& r, bool stats) {
  uint64_t bytes = 0;
  for (const ptd::ExtractedTensor& t : r.tensors) bytes += t.nbytes;
  std::string out = absl::StrCat(
      "wrote ", ptd::internal::Plural(r.tensors.size(), "tensor", "tensors"), " (",
      ptd::internal::Plural(bytes, "byte", "bytes"), ") to ",
      r.files.size() == 1 ? r.files[0]
                          : absl::StrCat(ptd::internal::Plural(r.files.size(), "file", "files"),
                                         ": ", absl::StrJoin(r.files, ", ")),
      "\n");
  if (!r.runtime_owned.empty()) {
    absl::StrAppend(&out, "left out (runtime-owned, no stored bytes): ",
                    absl::StrJoin(r.runtime_owned, ", "), "\n");
  }
  for (const ptd::Diagnostic& d : r.report.warnings()) {
    absl::StrAppend(&out, "warning: ", d.message, "\n");
  }
  if (stats) {
    absl::StrAppend(&out, "\n",
                    absl::StrFormat("%-40s %-9s %10s %10s %14s %14s\n", "tensor", "dtype", "NaN",
                                    "Inf", "min", "max"));
    for (const ptd::ExtractedTensor& t : r.tensors) {
      if (!t.stats) continue;
      const ptd::WeightStats& s = *t.stats;
      absl::StrAppend(&out, absl::StrFormat("%-40s %-9s %10d %10d %14s %14s\n", t.name,
                                            ptd::ScalarTypeName(t.scalar_type), s.nan, s.inf,
                                            s.min ? absl::StrFormat("%.6g", *s.min) : "-",
                                            s.max ? absl::StrFormat("%.6g", *s.max) : "-"));
    }
  }
  return out;
}

int Main(int argc, char** argv) {
  ptd::BundlePaths inputs;
  std::string out;
  std::string shard_text;
  bool json_out = false;
  ptd::ExtractOptions options;

  CLI::App app(
      "Writes the weights of an ExecuTorch .ptd as a safetensors checkpoint: each stored "
      "weight's view, row-major, under its fqn (with --manifest or --pte), or each key's "
      "bytes as a U8 tensor (without). The inputs are verified first; __metadata__ records "
      "each source file and its sha256.\n"
      "Exit codes: 0 written, 1 a rule is broken, 2 usage error, unreadable input or a "
      "failed write. Nothing is written unless everything succeeds.",
      "ptd-extract");
  ptd::cli::SetUp(app, PTD_VERSION);
  app.add_option("ptd", inputs.ptd, "the .ptd file")->required()->type_name("FILE.ptd");
  auto* manifest =
      app.add_option("--manifest")->description(ptd::cli::ManifestFlagHelp())->type_name("FILE");
  auto* pte =
      app.add_option("--pte", "a .pte whose CUDA delegates carry manifests")->type_name("FILE");
  app.add_option("-o,--out", out,
                 "the .safetensors file to write; with --max-shard-size, a folder for the "
                 "shards and model.safetensors.index.json")
      ->required()
      ->type_name("PATH");
  auto* shard_opt = app.add_option("--max-shard-size", shard_text,
                                   "write shards of at most this many bytes of tensor data each (a "
                                   "larger tensor gets a shard of its own), e.g. 5G or 500M")
                        ->type_name("SIZE")
                        ->check(CLI::Validator(
                            [](std::string& v) -> std::string {
                              uint64_t n;
                              return ptd::cli::ParseByteSize(v, &n) && n > 0
                                         ? std::string()
                                         : "a positive size: digits with an optional K, M, G or T";
                            },
                            ""));
  app.add_flag("--stats", options.stats,
               "count NaN and Inf and give min and max of each floating weight (warning N1 "
               "for NaN or Inf)");
  app.add_flag("--json", json_out, "print one JSON object on stdout");

  if (const std::optional<int> rc = ptd::cli::ParseCommandLine(app, argc, argv)) return *rc;
  if (!manifest->empty()) inputs.manifest = manifest->as<std::string>();
  if (!pte->empty()) inputs.pte = pte->as<std::string>();
  if (!shard_opt->empty()) {
    uint64_t n = 0;
    (void)ptd::cli::ParseByteSize(shard_text, &n);  // Checked when parsed.
    options.max_shard_size = n;
  }

  const absl::StatusOr<ptd::ExtractResult> result = ptd::ExtractWeights(inputs, out, options);
  if (!result.ok()) return ptd::cli::ReportFailure("ptd-extract", result.status(), json_out);
  ptd::cli::WriteOut(json_out ? ptd::DumpJson(ResultJson(*result))
                              : ResultText(*result, options.stats));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ptd::cli::RunGuarded("ptd-extract", [&] { return Main(argc, argv); });
}
