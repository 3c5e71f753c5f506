// `deepinfer generate --kv-cache-dir`: a second process with the same store directory loads the
// first one's pages and prints the same tokens; bad store flags are clear errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kvstore_test_util.h"
#include "run_cli.h"

namespace deepinfer::testing {
namespace {

// 200 prompt tokens: one full 128-token page before the page of the last token.
std::string generate_args(const std::string& fixture = "llama") {
  std::string ids;
  for (int i = 0; i < 200; ++i) {
    if (i > 0) ids += ',';
    ids += std::to_string((i * 37 + 11) % 397);
  }
  return "generate --model " DEEPINFER_TEST_DATA_DIR "/" + fixture + " --tokens " + ids + " --max-tokens 8 --threads 1";
}

TEST(CliStore, ASecondProcessLoadsTheStoredPagesAndPrintsTheSameTokens) {
  TempDir dir;
  const CliResult plain = run_cli(generate_args(), /*with_stderr=*/false);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const std::string tokens = plain.out.substr(0, plain.out.find('\n'));
  ASSERT_FALSE(tokens.empty());
  // The tiny fixture recomputes a page faster than a cold disk read: always load here.
  const std::string store_args = generate_args() + " --kv-cache-load always --kv-cache-dir " + dir.path();
  ::setenv("DEEPINFER_LOG", "info", 1);
  const CliResult first = run_cli(store_args);
  const CliResult second = run_cli(store_args);
  ::unsetenv("DEEPINFER_LOG");
  ASSERT_EQ(first.exit_code, 0) << first.out;
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(first.out.find("kv store: 0 pages loaded, 1 queued"), std::string::npos) << first.out;
  EXPECT_NE(second.out.find("kv store: 1 pages loaded"), std::string::npos) << second.out;
  EXPECT_NE(first.out.find(tokens), std::string::npos) << first.out;
  EXPECT_NE(second.out.find(tokens), std::string::npos) << second.out;
  // The weights are hashed once for the model's identity; the second process reads the hash
  // from the store directory's cache.
  EXPECT_NE(first.out.find("kv store: hashed 1 weight files"), std::string::npos) << first.out;
  EXPECT_EQ(second.out.find("kv store: hashed"), std::string::npos) << second.out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/model-hashes"));
}

// Mistral (every layer slides): the store keeps the page's token ids and a hit replays the
// window layers; exact mode prints a cold run's tokens.
TEST(CliStore, ASlidingWindowModelHitsWithAnExactReplay) {
  TempDir dir;
  const CliResult plain = run_cli(generate_args("mistral_swa"), /*with_stderr=*/false);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const std::string tokens = plain.out.substr(0, plain.out.find('\n'));
  const std::string store_args =
      generate_args("mistral_swa") + " --kv-cache-load always --swa-replay-tokens exact --kv-cache-dir " + dir.path();
  ::setenv("DEEPINFER_LOG", "info", 1);
  const CliResult first = run_cli(store_args);
  const CliResult second = run_cli(store_args);
  ::unsetenv("DEEPINFER_LOG");
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(second.out.find("a hit replays up to 128 tokens"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("kv store: 1 pages loaded"), std::string::npos) << second.out;
  EXPECT_NE(first.out.find(tokens), std::string::npos) << first.out;
  EXPECT_NE(second.out.find(tokens), std::string::npos) << second.out;
}

TEST(CliStore, BadStoreFlagsAreErrors) {
  const CliResult backend = run_cli(generate_args() + " --kv-cache-dir /tmp/x --kv-cache-backend s3");
  EXPECT_EQ(backend.exit_code, 1);
  EXPECT_NE(backend.out.find("--kv-cache-backend 's3': expected disk or redis://host:port"), std::string::npos)
      << backend.out;
  const CliResult load = run_cli(generate_args() + " --kv-cache-dir /tmp/x --kv-cache-load sometimes");
  EXPECT_EQ(load.exit_code, 1);
  EXPECT_NE(load.out.find("--kv-cache-load must be auto or always"), std::string::npos) << load.out;
  const CliResult replay = run_cli(generate_args() + " --kv-cache-dir /tmp/x --swa-replay-tokens all");
  EXPECT_EQ(replay.exit_code, 1);
  EXPECT_NE(replay.out.find("--swa-replay-tokens must be a token count >= 1 or 'exact', got 'all'"), std::string::npos)
      << replay.out;
  const CliResult bytes = run_cli(generate_args() + " --kv-cache-host-bytes 100");
  EXPECT_EQ(bytes.exit_code, 1);
  EXPECT_NE(bytes.out.find("need --kv-cache-dir"), std::string::npos) << bytes.out;
}

}  // namespace
}  // namespace deepinfer::testing
