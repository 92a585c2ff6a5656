// ptd_pread_ceiling: the whole-process ceiling of scripts/cli_bench.py. It
// reads a file with pread(2) in 4 MiB calls on one thread and exits:
//   ptd_pread_ceiling FILE           into one fresh buffer of the file's
//                                    size (first-touch faults included, as
//                                    for a loader's fresh destinations);
//   ptd_pread_ceiling FILE --reused  into one 4 MiB buffer, over and over
//                                    (as dd bs=4M: no faults after the first
//                                    call).
// Exit 0 when every byte was read, 1 otherwise (with the reason on stderr).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string_view(argv[2]) != "--reused")) {
    std::fprintf(stderr, "usage: ptd_pread_ceiling FILE [--reused]\n");
    return 2;
  }
  const bool reused = argc == 3;
  const int fd = ::open(argv[1], O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    std::fprintf(stderr, "ptd_pread_ceiling: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  constexpr size_t kChunk = size_t{4} << 20;
  const size_t size = static_cast<size_t>(st.st_size);
  // Page-aligned (as dd's buffer and the loader's big blocks are: a copy to
  // a destination 16 bytes off a page is several times slower on some CPUs)
  // and uninitialized, so that the reads are the first touch.
  constexpr size_t kPage = 4096;
  const size_t bytes = ((reused ? kChunk : size) + kPage) / kPage * kPage;
  std::unique_ptr<unsigned char, decltype(&std::free)> buffer(
      static_cast<unsigned char*>(std::aligned_alloc(kPage, bytes)), &std::free);
  if (buffer == nullptr) {
    std::fprintf(stderr, "ptd_pread_ceiling: cannot allocate %zu bytes\n", bytes);
    return 1;
  }
  for (size_t done = 0; done < size;) {
    const size_t n = size - done < kChunk ? size - done : kChunk;
    const ssize_t got =
        ::pread(fd, buffer.get() + (reused ? 0 : done), n, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      std::fprintf(stderr, "ptd_pread_ceiling: %s: read failed at %zu\n", argv[1], done);
      return 1;
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return 0;
}
