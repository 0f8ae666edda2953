// The NCCL communicator life cycle of patch 0104 (horovod/common/ops/nccl_lifecycle.h),
// on the CPU: a fake communicator state stands in for ncclCommGetAsyncError. Prints one line
// per failed check and exits 1 if any failed. With the argument "stock-order" the teardown
// runs in stock Horovod's order (free the communicators, then join the finalizers) and the
// same check must fail: the test can tell the two orders apart.
#include "nccl_lifecycle.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

using horovod::common::NcclWait;
using horovod::common::TeardownInOrder;
using horovod::common::WaitNonBlocking;

namespace {
const int kSuccess = 0, kError = 3, kInProgress = 7;  // ncclSuccess, ncclInternalError, ncclInProgress
int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

// a state that is in progress for `busy` polls, then `then`
struct FakeState {
  int busy, then, polls = 0;
  int operator()() { return ++polls <= busy ? kInProgress : then; }
};

void wait_cases() {
  auto never = [] { return false; };
  auto nopause = [] {};
  int code = -1;
  FakeState done{3, kSuccess};
  check(WaitNonBlocking(kInProgress, kSuccess, kInProgress, std::ref(done), never, nopause, code) ==
            NcclWait::kDone && code == kSuccess && done.polls == 4,
        "an init in progress that completes after 3 polls is done");
  FakeState failed{2, kError};
  check(WaitNonBlocking(kInProgress, kSuccess, kInProgress, std::ref(failed), never, nopause, code) ==
            NcclWait::kFailed && code == kError,
        "an init in progress that fails reports the failure's code");
  FakeState untouched{0, kSuccess};
  check(WaitNonBlocking(kSuccess, kSuccess, kInProgress, std::ref(untouched), never, nopause, code) ==
            NcclWait::kDone && untouched.polls == 0,
        "a blocking call's success is not polled");
  check(WaitNonBlocking(kError, kSuccess, kInProgress, std::ref(untouched), never, nopause, code) ==
            NcclWait::kFailed && code == kError && untouched.polls == 0,
        "a call that fails at once is not polled");
  // a peer gone: the init never completes; the abort that reaches Gloo comes after 5 polls
  FakeState hung{1 << 30, kSuccess};
  std::atomic<bool> abort{false};
  int pauses = 0;
  auto pause = [&] {
    if (++pauses == 5) abort = true;
  };
  check(WaitNonBlocking(kInProgress, kSuccess, kInProgress, std::ref(hung), [&] { return abort.load(); },
                        pause, code) == NcclWait::kAborted && hung.polls == 5,
        "an init that never completes ends at the first poll after the abort");
}

// a communicator that a finalizer thread polls until the teardown mark (AsyncErrorCheck)
struct FakeComm {
  std::atomic<bool> freed{false};
};

bool teardown(bool stock_order) {
  FakeComm comm;
  std::atomic<bool> mark{false}, used_after_free{false}, started{false}, finished{false};
  std::atomic<int> polls{0};
  std::thread finalizer([&] {
    started = true;
    while (true) {  // an operation whose kernel never completes: only the mark ends the wait
      if (mark.load()) break;                         // AsyncErrorCheck: AbortRequested() first
      if (comm.freed.load()) used_after_free = true;  // ncclCommGetAsyncError on the comm
      ++polls;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    finished = true;
  });
  while (!started.load()) std::this_thread::yield();
  auto begin = [&] { mark = true; };
  auto join = [&] { finalizer.join(); };
  auto free_comms = [&] {
    comm.freed = true;
    // a finalizer still running polls again: wait for two more of its polls (no timing)
    int seen = polls.load();
    while (!finished.load() && polls.load() < seen + 2) std::this_thread::yield();
  };
  if (stock_order) {  // stock Horovod: ShutDown (free), then gpu_context.Finalize (join); the
    free_comms();     // mark is this project's, set here only so the join can end at all
    begin();
    join();
  } else {
    TeardownInOrder(begin, join, free_comms);
  }
  return !used_after_free.load();
}
}  // namespace

int main(int argc, char** argv) {
  bool stock = argc > 1 && std::strcmp(argv[1], "stock-order") == 0;
  wait_cases();
  check(teardown(stock), "no finalizer polls a communicator after it was freed");
  if (failures == 0) std::printf("ok\n");
  return failures == 0 ? 0 : 1;
}
