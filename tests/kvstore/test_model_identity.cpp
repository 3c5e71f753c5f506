// The model identity in the store's keys: it follows every weight byte (a fine-tune with the same
// headers and shapes gets another identity), its content-hash cache is used while a file is
// unchanged and survives being torn or corrupted (a corrupt cache is ignored, never believed).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "kvstore/model_identity.h"
#include "kvstore_test_util.h"

namespace deepinfer {
namespace {

using testing::TempDir;

// A safetensors file of one float32 tensor of 3 MiB (more than the first and last MiB).
constexpr size_t kTensorBytes = size_t{3} << 20;

std::string weights_path(const TempDir& model) { return model.path() + "/model.safetensors"; }

void write_weights(const TempDir& model, const std::string& tensor_name = "w") {
  const std::string header = "{\"" + tensor_name + "\":{\"dtype\":\"F32\",\"shape\":[" +
                             std::to_string(kTensorBytes / 4) + "],\"data_offsets\":[0," +
                             std::to_string(kTensorBytes) + "]}}";
  const uint64_t length = header.size();
  std::ofstream out(weights_path(model), std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out << header;
  std::vector<char> data(kTensorBytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// A fine-tune: one weight byte in the middle of the tensor changes; size and header stay.
void change_middle_weight(const TempDir& model) {
  std::fstream f(weights_path(model), std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(std::filesystem::file_size(weights_path(model)) / 2);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 1);
  f.seekp(at);
  f.write(&c, 1);
}

// File times come from the kernel's coarse clock (a tick of up to 10 ms): a change within the
// tick of the previous write would keep the file's key. Real weights are not rewritten that fast.
void let_the_file_clock_tick() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

std::string identity_of(const TempDir& model, const std::string& cache = "") {
  auto identity = fingerprint_model_dir(model.path(), cache);
  EXPECT_TRUE(identity.ok()) << identity.error().message;
  return identity.ok() ? *identity : "";
}

TEST(ModelIdentity, AFineTuneWithTheSameHeadersGetsAnotherIdentity) {
  TempDir model, store;
  write_weights(model);
  const std::string cache = model_hash_cache_path(store.path());
  const std::string base = identity_of(model);
  EXPECT_EQ(identity_of(model, cache), base);
  EXPECT_EQ(identity_of(model, cache), base);  // from the cache
  let_the_file_clock_tick();
  change_middle_weight(model);
  const std::string tuned = identity_of(model);
  EXPECT_NE(tuned, base);
  EXPECT_EQ(identity_of(model, cache), tuned);
  // Another tensor name, same bytes: the header differs.
  let_the_file_clock_tick();
  write_weights(model, "v");
  EXPECT_NE(identity_of(model), base);
}

// The cache answers while the file's key (device, inode, size, mtime, ctime) is unchanged: a
// forged entry under the file's key shows through, so the weights were not read again.
TEST(ModelIdentity, TheCacheAnswersForAnUnchangedFile) {
  TempDir model, store;
  write_weights(model);
  const std::string cache_path = model_hash_cache_path(store.path());
  const std::string truth = identity_of(model, cache_path);
  const FileKey key = file_key_of(weights_path(model)).value();
  ContentHashCache cache = ContentHashCache::load(cache_path);
  ASSERT_EQ(cache.num_entries(), 1u);
  EXPECT_NE(truth.find(":content=" + cache.find(key).value() + ";"), std::string::npos) << truth;
  cache.insert(key, std::string(32, 'f'));
  ASSERT_TRUE(cache.save().ok());
  EXPECT_NE(identity_of(model, cache_path).find(":content=" + std::string(32, 'f')), std::string::npos);
  // Rewriting the file's bytes as they were changes its ctime: hashed again, the truth is back.
  let_the_file_clock_tick();
  write_weights(model);
  EXPECT_EQ(identity_of(model, cache_path), truth);
}

// Each damage to the cache file: the identity is still the content's (the damaged entry is
// ignored and the file hashed again) and the cache is whole again afterwards.
TEST(ModelIdentity, ATornOrCorruptCacheIsIgnoredAndRebuilt) {
  TempDir model, store;
  write_weights(model);
  const std::string cache_path = model_hash_cache_path(store.path());
  const std::string truth = identity_of(model);
  const FileKey key = file_key_of(weights_path(model)).value();
  const auto rewrite = [&](const std::function<void(std::string&)>& damage) {
    ASSERT_EQ(identity_of(model, cache_path), truth);
    std::ifstream in(cache_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    damage(text);
    std::ofstream(cache_path, std::ios::trunc) << text;
  };
  const std::vector<std::pair<std::string, std::function<void(std::string&)>>> damages = {
      // One hex digit of the stored hash: the line still parses, its checksum does not match.
      {"flipped hash digit",
       [&](std::string& text) {
         const std::string hash = ContentHashCache::load(cache_path).find(key).value();
         const size_t at = text.find(hash);
         text[at] = text[at] == '0' ? '1' : '0';
       }},
      {"truncated line", [](std::string& text) { text.resize(text.size() - 10); }},
      {"zero-filled tail", [](std::string& text) { std::fill(text.end() - 20, text.end(), '\0'); }},
      {"garbage", [](std::string& text) { text = "not a cache\n\x01\x02\n"; }},
      {"empty", [](std::string& text) { text.clear(); }},
  };
  for (const auto& [name, damage] : damages) {
    SCOPED_TRACE(name);
    rewrite(damage);
    EXPECT_EQ(identity_of(model, cache_path), truth);
    EXPECT_TRUE(ContentHashCache::load(cache_path).find(key).has_value());
  }
}

TEST(ModelIdentity, TheCacheKeepsItsNewestEntries) {
  TempDir store;
  const std::string path = model_hash_cache_path(store.path());
  ContentHashCache cache = ContentHashCache::load(path);
  const size_t total = ContentHashCache::kMaxEntries + 10;
  for (size_t i = 0; i < total; ++i) {
    FileKey key;
    key.inode = i;
    cache.insert(key, std::string(32, 'a'));
  }
  ASSERT_TRUE(cache.save().ok());
  const ContentHashCache loaded = ContentHashCache::load(path);
  EXPECT_EQ(loaded.num_entries(), ContentHashCache::kMaxEntries);
  FileKey oldest, newest;
  oldest.inode = 0;
  newest.inode = total - 1;
  EXPECT_FALSE(loaded.find(oldest).has_value());
  EXPECT_TRUE(loaded.find(newest).has_value());
}

TEST(ModelIdentity, AFileThatIsNotSafetensorsIsAnError) {
  TempDir model;
  std::ofstream(weights_path(model)) << "\xff\xff\xff\xff\xff\xff\xff\x7f{}";
  auto identity = fingerprint_model_dir(model.path());
  ASSERT_FALSE(identity.ok());
  EXPECT_NE(identity.error().message.find("not a safetensors file"), std::string::npos) << identity.error().message;
}

}  // namespace
}  // namespace deepinfer
