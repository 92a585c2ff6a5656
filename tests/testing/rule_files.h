// The regression inputs of docs/SPEC.md's rules: one small case per rule ID,
// built with the project's own builders (raw_ptd, pte_builder, PtdWriter),
// checked in under tests/data/rules/ and read from there by
// tests/verifier/rule_files_test.cc.
//
// Naming: <RULE>_<short_name>.<ext>. The files of one case share the stem:
//   .ptd          the container (every verifier case has one)
//   .manifest     a standalone manifest (--manifest)
//   .pte          a program (--pte)
//   .verify.json  verifier options: {"digest": bool, "digest_limit": n,
//                 "stats": bool}
//   .safetensors  a file SafetensorsFile::Open must refuse (S1-S6), or with
//                 .reweight.json the checkpoint
//   .safetensors.index.json, .shardN.safetensors
//                 a sharded checkpoint SafetensorsCheckpoint::Open must
//                 refuse (S7)
//   .reweight.json  a re-weighting Reweight must refuse (S8-S10), or write with
//                   a warning (S11, S12): the
//                 .manifest is the program, the .safetensors the checkpoint
//   .writer.json  a CudaWeightWriter input the writer must refuse (W rules):
//                 {"so_blob_key", "weights": [{"fqn", "dtype",
//                  "device_type", "value": {"storage_nbytes",
//                  "storage_offset", "sizes", "strides",
//                  "is_original_storage"}, "properties": {"storage_size"
//                  (or null), "offset", "shape", "stride"}}]}
// The case asserts its own rule: an error of that rule, or for a warning
// rule (ptd::IsWarningRule: H5, G5, X3, ...) that warning and no error. X2 is
// checked by the G rules it names (G1-G4 between a manifest and a .ptd); its
// case asserts one of those.
//
// Regenerate (reproducible: the same bytes every time):
//   cmake --build build --target ptd_make_rule_files
//   build/tests/ptd_make_rule_files tests/data/rules
#ifndef PTD_TESTS_TESTING_RULE_FILES_H_
#define PTD_TESTS_TESTING_RULE_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ptd::testing {

struct RuleFile {
  std::string name;  // File name, e.g. "G2_view_past_storage.manifest".
  std::vector<uint8_t> bytes;
};

// Every file of every case, in a fixed order.
std::vector<RuleFile> RuleFiles();

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_RULE_FILES_H_
