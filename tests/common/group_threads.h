// A communicator group with its ranks as threads of the test process (each with its own TCP pairs,
// as separate processes would have), over a fresh rendezvous directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"

namespace deepinfer::testing {

// An empty rendezvous directory's path, unique to this process and name.
inline std::string fresh_rendezvous(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("deepinfer-comm-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Runs body(communicator) on world_size ranks, one thread each, and waits for all of them.
inline void run_group(int32_t world_size, const std::string& name, std::chrono::milliseconds timeout,
                      const std::function<void(std::shared_ptr<Communicator>)>& body) {
  const std::string rendezvous = fresh_rendezvous(name);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      GroupOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.rendezvous = rendezvous;
      options.group_name = name;
      options.timeout = timeout;
      auto communicator = connect_group(options);
      ASSERT_TRUE(communicator.ok()) << communicator.error().message;
      body(std::move(*communicator));
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(rendezvous);
}

}  // namespace deepinfer::testing
