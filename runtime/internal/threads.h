// Runs one piece of work on several threads at once: the loader's readers,
// the signing library's hashers.
#ifndef PTD_INTERNAL_THREADS_H_
#define PTD_INTERNAL_THREADS_H_

#include <algorithm>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace ptd::internal {

// Runs `work` on `n` threads (at least one), the calling thread one of them.
// Where the system gives no more threads, on those it gave: `work` must take
// its items from a shared counter, so that fewer threads still do them all.
template <typename F>
void RunOnThreads(size_t n, const F& work) {
  n = std::max<size_t>(1, n);
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (size_t t = 1; t < n; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : threads) t.join();
}

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_THREADS_H_
