// main() of the kvstore test binary. With DIKV_CHILD set it is not a test run but a child
// process of one: "page_writer" streams pages into DIKV_DIR until killed; "rename_crash" writes
// pages into DIKV_DIR and is killed between a page's write and its rename; "engine_run" runs
// one prompt through an engine with a store (test_engine_store.cpp).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "kvstore/disk_tier.h"
#include "kvstore_test_util.h"

namespace deepinfer::testing {
int run_engine_child();  // test_engine_store.cpp
}  // namespace deepinfer::testing

namespace {

int run_page_writer() {
  deepinfer::KvStoreConfig config;
  config.dir = std::getenv("DIKV_DIR");
  config.host_bytes = 0;
  auto store = deepinfer::KvStore::open(config, "test-layout");
  if (!store.ok()) return 2;
  const auto pages = deepinfer::testing::make_chain(deepinfer::testing::kChildPages, 16, 2048, 7);
  for (const auto& page : pages) {
    (*store)->enqueue_write(deepinfer::testing::to_write(page));
    (*store)->flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

int run_rename_crash() {
  using deepinfer::testing::kRenameCrashPages;
  deepinfer::DiskTier tier(std::getenv("DIKV_DIR"), int64_t{1} << 30, deepinfer::RetentionConfig{});
  const auto pages = deepinfer::testing::make_chain(kRenameCrashPages, 16, 2048, 7);
  for (const auto& page : pages) {
    if (page.request.page_index == kRenameCrashPages - 1) {
      tier.set_before_rename([](const std::string&) { ::raise(SIGKILL); });
    }
    const deepinfer::SharedPage image = deepinfer::testing::stored_image_of(page);
    deepinfer::PageEntryInfo info;
    info.bytes = static_cast<int64_t>(image->size());
    info.depth = page.request.page_index;
    if (!tier.put(page.request.hash, info, image)) return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* child = std::getenv("DIKV_CHILD")) {
    omp_set_num_threads(1);
    const std::string mode = child;
    if (mode == "page_writer") return run_page_writer();
    if (mode == "rename_crash") return run_rename_crash();
    if (mode == "engine_run") return deepinfer::testing::run_engine_child();
    return 3;
  }
  // The engine tests run on one OpenMP thread: on a busy 2-core machine, barriers between the
  // tiny fixtures' kernels cost more than the work.
  omp_set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
