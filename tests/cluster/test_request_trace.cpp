// Reading Mooncake traces: the fields, the request limit, and errors that name the line.
#include <gtest/gtest.h>

#include <string>

#include "cluster/request_trace.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

// A trace file holding `text`, removed with the object.
class TraceFile {
 public:
  explicit TraceFile(const std::string& text) : path_(dir_.write("trace.jsonl", text)) {}
  const std::string& path() const { return path_; }

 private:
  testing::TempDir dir_;
  std::string path_;
};

TEST(RequestTrace, ReadsEveryFieldAndSkipsBlankLines) {
  TraceFile file(
      "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 12.5, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [0, 7]}\n");
  auto trace = read_mooncake_trace(file.path(), 0);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[1].timestamp_ms, 12.5);
  EXPECT_EQ((*trace)[1].input_tokens, 600);
  EXPECT_EQ((*trace)[1].output_tokens, 1);
  EXPECT_EQ((*trace)[1].block_hashes, (std::vector<uint64_t>{0, 7}));
  auto first = read_mooncake_trace(file.path(), 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->size(), 1u);
}

TEST(RequestTrace, ErrorsNameTheLineAndWhatIsWrong) {
  const std::string good = "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0]}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"not json\n", "not a JSON object"},
      {"{\"timestamp\": 6, \"input_length\": 10, \"hash_ids\": [0]}\n", "output_length"},
      {"{\"timestamp\": 6, \"input_length\": -3, \"output_length\": 2, \"hash_ids\": [0]}\n", "input_length"},
      {"{\"timestamp\": 6, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [0]}\n", "output_length"},
      {"{\"timestamp\": 6, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [\"a\"]}\n", "hash_ids"},
      {"{\"timestamp\": 4, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0]}\n", "earlier"},
  };
  for (const auto& [line, what] : cases) {
    TraceFile file(good + line);
    auto trace = read_mooncake_trace(file.path(), 0);
    ASSERT_FALSE(trace.ok()) << line;
    EXPECT_NE(trace.error().message.find(".jsonl:2: "), std::string::npos) << trace.error().message;
    EXPECT_NE(trace.error().message.find(what), std::string::npos) << trace.error().message;
  }
}

TEST(RequestTrace, AMissingOrEmptyFileIsAnError) {
  EXPECT_FALSE(read_mooncake_trace("/nonexistent/trace.jsonl", 0).ok());
  TraceFile empty("\n");
  EXPECT_FALSE(read_mooncake_trace(empty.path(), 0).ok());
}

}  // namespace
}  // namespace deepinfer
