// Splitting a vocabulary by a character class (inside tokens by length, exits by position) and
// the per-vocabulary cache of those splits.
#include "grammar/token_classes.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "grammar/token_vocab.h"

namespace deepinfer::grammar {

std::string CharClass::key() const {
  std::string k(sizeof(ascii.bits) + 1, '\0');
  std::memcpy(k.data(), ascii.bits, sizeof(ascii.bits));
  k.back() = multibyte ? '\1' : '\0';
  return k;
}

const std::vector<Utf8Form>& utf8_forms() {
  static const std::vector<Utf8Form> forms = {
      {2, {0xC2, 0x80, 0, 0}, {0xDF, 0xBF, 0, 0}},       {3, {0xE0, 0xA0, 0x80, 0}, {0xE0, 0xBF, 0xBF, 0}},
      {3, {0xE1, 0x80, 0x80, 0}, {0xEC, 0xBF, 0xBF, 0}}, {3, {0xED, 0x80, 0x80, 0}, {0xED, 0x9F, 0xBF, 0}},
      {3, {0xEE, 0x80, 0x80, 0}, {0xEF, 0xBF, 0xBF, 0}}, {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
      {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}}, {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
  };
  return forms;
}

const std::vector<ByteSet>& standard_ascii_classes() {
  static const std::vector<ByteSet> classes = [] {
    auto range = [](uint8_t lo, uint8_t hi, std::string_view minus = {}) {
      ByteSet set;
      set.add_range(lo, hi);
      for (char c : minus) set.bits[static_cast<uint8_t>(c) >> 6] &= ~(uint64_t{1} << (c & 63));
      return set;
    };
    ByteSet letters = range('a', 'z'), alnum, word, lower_digits = range('a', 'z');
    letters.merge(range('A', 'Z'));
    alnum = letters, alnum.merge(range('0', '9'));
    word = alnum, word.add('_'), word.add('-');
    lower_digits.merge(range('0', '9'));
    // Printable text; a JSON string's raw characters (with and without DEL); identifiers.
    return std::vector<ByteSet>{range(0x20, 0x7E), range(0x20, 0x7F, "\"\\"), range(0x20, 0x7E, "\"\\"),
                                word, alnum, letters, lower_digits};
  }();
  return classes;
}

int utf8_sequence_length(const std::string& s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  for (const Utf8Form& f : utf8_forms()) {
    if (lead < f.lo[0] || lead > f.hi[0]) continue;
    if (i + static_cast<size_t>(f.length) > s.size()) return 0;
    for (int k = 1; k < f.length; ++k) {
      const auto c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      if (c < f.lo[k] || c > f.hi[k]) return 0;
    }
    return f.length;
  }
  return 0;
}

size_t codepoint_offset(const std::string& s, int k) {
  size_t i = 0;
  for (int c = 0; c < k; ++c) {
    const int n = static_cast<uint8_t>(s[i]) < 0x80 ? 1 : utf8_sequence_length(s, i);
    i += static_cast<size_t>(n == 0 ? 1 : n);
  }
  return i;
}

namespace {

std::shared_ptr<const TokenClassIndex> build_index(const TokenVocab& vocab, const CharClass& cc) {
  auto index = std::make_shared<TokenClassIndex>();
  const auto num_words = static_cast<size_t>(vocab.num_mask_words());
  constexpr int kCapped = TokenClassIndex::kMaxCounted + 1;
  // Bucket sorts (by capped code point count, then exit byte): this runs on a mask's critical
  // path the first time a class is seen.
  std::vector<std::vector<int32_t>> inside(kCapped + 1);
  std::vector<std::vector<TokenClassIndex::Exit>> leaving((kCapped + 1) * 256);
  index->inside_mask.assign(num_words, 0);
  for (int32_t id = 0; id < vocab.num_tokens(); ++id) {
    const std::string& s = vocab.token_bytes(id);
    // Same exclusions as the trie: such tokens are never allowed.
    if (s.empty() || s.size() > TokenVocab::kMaxTokenBytes) continue;
    size_t i = 0;
    int32_t count = 0;
    while (i < s.size()) {
      const auto b = static_cast<uint8_t>(s[i]);
      const int n = b < 0x80 ? (cc.ascii.has(b) ? 1 : 0) : (cc.multibyte ? utf8_sequence_length(s, i) : 0);
      if (n == 0) break;
      i += static_cast<size_t>(n);
      ++count;
    }
    const auto capped = static_cast<size_t>(std::min(count, kCapped));
    if (i < s.size()) {
      leaving[capped * 256 + static_cast<uint8_t>(s[i])].push_back({id, static_cast<int32_t>(i)});
      continue;
    }
    index->inside_mask[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
    inside[capped].push_back(id);
  }
  std::vector<uint32_t> mask(num_words, 0);
  for (int c = 0; c <= kCapped; ++c) {
    index->first_with_count.push_back(index->inside_ids.size());
    for (int32_t id : inside[static_cast<size_t>(c)]) {
      mask[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
      index->inside_ids.push_back(id);
    }
    if (c < kCapped) index->prefix_masks.push_back(mask);
  }
  for (size_t key = 0; key < leaving.size(); ++key) {
    if (leaving[key].empty()) continue;
    const auto begin = static_cast<uint32_t>(index->exits.size());
    index->exits.insert(index->exits.end(), leaving[key].begin(), leaving[key].end());
    index->exit_groups.push_back({static_cast<int32_t>(key / 256), static_cast<uint8_t>(key % 256), begin,
                                  static_cast<uint32_t>(index->exits.size())});
  }
  return index;
}

}  // namespace

std::shared_ptr<const TokenClassIndex> TokenClassCache::get(const TokenVocab& vocab, const CharClass& char_class) {
  const std::string key = char_class.key();
  {
    std::lock_guard lock(mutex_);
    if (auto found = entries_.find(key); found != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second.second);
      return found->second.first;
    }
  }
  // Built outside the lock; two threads racing on one class both build, one result is kept.
  auto index = build_index(vocab, char_class);
  std::lock_guard lock(mutex_);
  if (auto found = entries_.find(key); found != entries_.end()) return found->second.first;
  while (!lru_.empty() && entries_.size() >= max_entries_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_.emplace(key, std::make_pair(index, lru_.begin()));
  return index;
}

}  // namespace deepinfer::grammar
