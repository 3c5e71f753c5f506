// WeightStore::open_dir: which files a model directory's weights come from (shard index, one
// model.safetensors, every *.safetensors) and the errors for inconsistent directories.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_files.h"
#include "weights/safetensors.h"

namespace deepinfer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;

// A file of F32 tensors of shape [2] whose two values are (i, -i) for the i-th name given.
void write_shard(const std::string& path, const std::vector<std::string>& names, float first_value = 1.0f) {
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < names.size(); ++i) {
    const float v = first_value + static_cast<float>(i);
    values.push_back({v, -v});
  }
  std::vector<TensorView> views;
  for (size_t i = 0; i < names.size(); ++i) {
    views.push_back({names[i], DType::kF32, {2}, values[i].data(), 8, ""});
  }
  Result<void> written = write_safetensors(path, views, {{"format", "pt"}});
  ASSERT_TRUE(written.ok()) << written.error().message;
}

float first_value(const WeightStore& store, const std::string& name) {
  return static_cast<const float*>(store.get(name, {2}).value().data)[0];
}

// The index names every tensor's shard; the writer's model.safetensors.index.json layout.
void write_index(const TempDir& dir, const std::string& weight_map_json) {
  write_file(dir.file("model.safetensors.index.json"),
             R"({"metadata": {"total_size": 24}, "weight_map": )" + weight_map_json + "}");
}

TEST(WeightDirTest, OpensAShardedCheckpointThroughItsIndex) {
  TempDir dir;
  write_shard(dir.file("model-00001-of-00002.safetensors"), {"embed", "layer.0"}, 1.0f);
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"lm_head"}, 10.0f);
  write_index(dir, R"({"embed": "model-00001-of-00002.safetensors", "layer.0": "model-00001-of-00002.safetensors",
                       "lm_head": "model-00002-of-00002.safetensors"})");
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(store->names(), (std::vector<std::string>{"embed", "layer.0", "lm_head"}));
  EXPECT_EQ(store->source(), dir.path());
  EXPECT_EQ(store->total_bytes(), 24u);
  EXPECT_EQ(first_value(*store, "layer.0"), 2.0f);
  EXPECT_EQ(first_value(*store, "lm_head"), 10.0f);
  EXPECT_EQ(store->find("lm_head")->file, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(store->metadata().at("format"), "pt");
  Result<TensorView> missing = store->get("norm", {2});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "norm is missing from " + dir.path());
}

TEST(WeightDirTest, IndexErrorsNameTheIndexShardAndTensor) {
  struct Case {
    const char* label;
    std::string weight_map;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"shard missing", R"({"a": "one.safetensors", "c": "three.safetensors"})", {"three.safetensors", "missing"}},
      {"tensor absent from its shard",
       R"({"a": "one.safetensors", "z": "one.safetensors"})",
       {"'z'", "one.safetensors", "has no tensor of that name"}},
      {"tensor in another shard",
       R"({"a": "two.safetensors", "b": "one.safetensors"})",
       {"'a'", "in two.safetensors, but it is in ", "one.safetensors"}},
      {"shard not a string", R"({"a": 1})", {"'a'", "shard file name"}},
      {"shard outside the directory", R"({"a": "../one.safetensors"})", {"'a'", "../one.safetensors"}},
      {"empty", R"({})", {"no tensors"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    TempDir dir;
    write_shard(dir.file("one.safetensors"), {"a"});
    write_shard(dir.file("two.safetensors"), {"b"});
    write_index(dir, c.weight_map);
    Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
    ASSERT_FALSE(store.ok());
    EXPECT_THAT(store.error().message, HasSubstr(dir.file("model.safetensors.index.json")));
    for (const std::string& part : c.expected) EXPECT_THAT(store.error().message, HasSubstr(part));
  }
}

TEST(WeightDirTest, InvalidIndexJsonGivesThePosition) {
  TempDir dir;
  write_shard(dir.file("one.safetensors"), {"a"});
  write_file(dir.file("model.safetensors.index.json"), "{\"weight_map\": {\"a\": }}");
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.error().message,
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("invalid JSON"), HasSubstr("column 22")));

  write_file(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  Result<WeightStore> no_map = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(no_map.ok());
  EXPECT_THAT(no_map.error().message, HasSubstr("weight_map"));
}

TEST(WeightDirTest, ATensorInTwoShardsIsAnError) {
  TempDir dir;
  write_shard(dir.file("one.safetensors"), {"a", "shared"});
  write_shard(dir.file("two.safetensors"), {"b", "shared"});
  write_index(dir, R"({"a": "one.safetensors", "b": "two.safetensors", "shared": "one.safetensors"})");
  Result<WeightStore> indexed = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(indexed.ok());
  EXPECT_THAT(indexed.error().message, AllOf(HasSubstr("'shared'"), HasSubstr(dir.file("one.safetensors")),
                                             HasSubstr(dir.file("two.safetensors"))));

  std::filesystem::remove(dir.file("model.safetensors.index.json"));
  Result<WeightStore> listed = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(listed.ok());
  // Files are read in name order, so the message names one.safetensors first.
  EXPECT_THAT(listed.error().message,
              HasSubstr("'shared' is in both " + dir.file("one.safetensors") + " and " + dir.file("two.safetensors")));
}

TEST(WeightDirTest, PrefersModelSafetensorsOverOtherFiles) {
  TempDir dir;
  write_shard(dir.file("model.safetensors"), {"w"}, 1.0f);
  write_shard(dir.file("adapter.safetensors"), {"w", "extra"}, 5.0f);
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(store->names(), std::vector<std::string>{"w"});
  EXPECT_EQ(first_value(*store, "w"), 1.0f);
}

TEST(WeightDirTest, FallsBackToEverySafetensorsFile) {
  TempDir dir;
  write_shard(dir.file("b.safetensors"), {"from_b"}, 2.0f);
  write_shard(dir.file("a.safetensors"), {"from_a"}, 1.0f);
  write_file(dir.file("notes.txt"), "not weights");
  std::filesystem::create_directory(dir.file("sub.safetensors"));  // a directory is not a weight file
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(store->names(), (std::vector<std::string>{"from_a", "from_b"}));
  EXPECT_EQ(first_value(*store, "from_b"), 2.0f);
}

TEST(WeightDirTest, DirectoryErrors) {
  TempDir dir;
  write_file(dir.file("config.json"), "{}");
  Result<WeightStore> empty = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message, "no *.safetensors in " + dir.path());

  Result<WeightStore> absent = WeightStore::open_dir(dir.file("nowhere"), false);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.error().message, AllOf(HasSubstr(dir.file("nowhere")), HasSubstr("does not exist")));

  Result<WeightStore> file = WeightStore::open_dir(dir.file("config.json"), false);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.error().message, AllOf(HasSubstr("config.json"), HasSubstr("not a directory")));
}

TEST(WeightDirTest, TruncatedShardIsAnError) {
  TempDir dir;
  write_shard(dir.file("model.safetensors"), {"a", "b"});
  const std::string bytes = testing::read_file(dir.file("model.safetensors"));
  write_file(dir.file("model.safetensors"), bytes.substr(0, bytes.size() - 3));
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), false);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.error().message, AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("truncated")));
}

TEST(WeightDirTest, ShowsProgressInBytes) {
  TempDir dir;
  write_shard(dir.file("model.safetensors"), {"a"});
  ::testing::internal::CaptureStderr();
  Result<WeightStore> store = WeightStore::open_dir(dir.path(), true);
  const std::string progress = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_THAT(progress, AllOf(HasSubstr("loading weights"), HasSubstr("100%"), HasSubstr("GB")));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(WeightStore::open_dir(dir.path(), false).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace deepinfer
