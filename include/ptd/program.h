// Program: the parts of an ExecuTorch .pte (ET12) this project reads.
//
// Finds every CUDA delegate ("CudaBackend") of every execution plan and
// hands out its processed payload (inline or from a segment). Layout and
// rules P1, P2, P4: docs/SPEC.md section 4. P3 needs the .ptd as well and is
// checked by the verification session.
//
// Lifetime: payload spans point into the FileSource's bytes (or into owned
// copies held by the Program) and live as long as the Program.
// Thread-safety: const methods are safe to call concurrently.
#ifndef PTD_PROGRAM_H_
#define PTD_PROGRAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/file_source.h"
#include "ptd/report.h"

namespace ptd {

inline constexpr std::string_view kCudaBackendId = "CudaBackend";
inline constexpr uint32_t kMinPteHeaderLength = 24;

// The extended header ("eh00" at offset 8). It is optional (SPEC section 4):
// without one (present == false) the program is the whole file
// (program_size = the file size) and has no segment data.
struct PteHeader {
  bool present = true;
  uint32_t header_length = 0;
  uint64_t program_size = 0;
  uint64_t segment_base_offset = 0;
  std::optional<uint64_t> segment_data_size;  // Present when length >= 32.
};

struct CudaDelegate {
  std::string method;           // ExecutionPlan name.
  uint32_t delegate_index = 0;  // Index among all delegates of that plan.
  std::string source;           // "pte:<method>:<delegate_index>".
  bool is_manifest = false;     // Payload starts with "ETCUDAFQN".
  Bytes payload;                // The processed bytes.
};

class Program {
 public:
  // Checks P1 and P2 and finds the CUDA delegates, appending every error and
  // warning (P4 for a legacy payload or for a program with no CUDA
  // delegate) to `report`. Returns the program when the header and the
  // FlatBuffer were sound (P1 holds for them); nullptr otherwise. Delegates
  // whose payload is missing (P2) are left out of cuda_delegates().
  static std::unique_ptr<Program> Verify(std::shared_ptr<const FileSource> source, Report* report);
  // For use: the first error as a Status.
  static absl::StatusOr<std::unique_ptr<Program>> Open(std::shared_ptr<const FileSource> source);

  const std::string& path() const { return source_->name(); }
  const PteHeader& header() const { return header_; }
  const std::vector<CudaDelegate>& cuda_delegates() const { return delegates_; }
  // Keys of the program's own named_data (for P3).
  const std::vector<std::string>& named_data_keys() const { return named_data_keys_; }

 private:
  explicit Program(std::shared_ptr<const FileSource> source) : source_(std::move(source)) {}

  std::shared_ptr<const FileSource> source_;
  PteHeader header_;
  std::vector<CudaDelegate> delegates_;
  std::vector<std::string> named_data_keys_;
  // For sources without views (pread): one copy of the file range that
  // holds every CUDA payload, read once; payloads borrow from it, so copies
  // never exceed the file size however many delegates share bytes.
  Bytes payload_region_;
};

}  // namespace ptd

#endif  // PTD_PROGRAM_H_
