// BPE encoding: initial symbols from bytes or characters, then repeated merging of the adjacent
// pair with the lowest rank (leftmost first), exactly as Hugging Face's Word::merge_all.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

constexpr size_t kSmallWord = 48;       // longer words merge with a heap instead of rescans
constexpr size_t kCacheMaxPiece = 96;   // longer pieces rarely repeat
constexpr size_t kCacheMaxEntries = 1 << 15;
constexpr std::string_view kWordMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// True when U+2581 appears in token after some other character.
bool has_inner_word_mark(std::string_view token) {
  size_t lead = 0;
  while (token.substr(lead, kWordMark.size()) == kWordMark) lead += kWordMark.size();
  return token.find(kWordMark, lead) != std::string_view::npos;
}

struct ByteAlphabet {
  char32_t byte_to_char[256];
  int16_t char_to_byte[324];
  ByteAlphabet() {
    std::fill(std::begin(char_to_byte), std::end(char_to_byte), -1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
      byte_to_char[b] = c;
      char_to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

int byte_level_char_to_byte(char32_t cp) { return cp < 324 ? byte_alphabet().char_to_byte[cp] : -1; }

char32_t byte_level_byte_to_char(uint8_t byte) { return byte_alphabet().byte_to_char[byte]; }

bool byte_level_decode(std::string_view token, std::string& bytes) {
  bytes.clear();
  size_t pos = 0;
  while (pos < token.size()) {
    int b = byte_level_char_to_byte(next_code_point(token, pos));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
  }
  return true;
}

// Word -> ids cache for one encode call, keyed by views of the caller's pieces.
class BpeCache {
 public:
  const int32_t* find(std::string_view key, uint64_t hash, size_t& count) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key.data() == nullptr) return nullptr;
      if (slot.hash == hash && slot.key == key) {
        count = slot.count;
        return ids_.data() + slot.offset;
      }
    }
  }
  void put(std::string_view key, uint64_t hash, const int32_t* ids, size_t count) {
    if (num_entries_ >= kCacheMaxEntries) clear();
    if ((num_entries_ + 1) * 2 > slots_.size()) grow();
    size_t i = hash & mask_;
    while (slots_[i].key.data() != nullptr) i = (i + 1) & mask_;
    slots_[i] = Slot{hash, key, static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
    ids_.insert(ids_.end(), ids, ids + count);
    ++num_entries_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    std::string_view key;
    uint32_t offset = 0;
    uint32_t count = 0;
  };
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    ids_.clear();
    num_entries_ = 0;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 256 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.key.data() == nullptr) continue;
      size_t i = slot.hash & mask_;
      while (slots_[i].key.data() != nullptr) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }
  std::vector<Slot> slots_;
  std::vector<int32_t> ids_;
  size_t mask_ = 0;
  size_t num_entries_ = 0;
};

BpeScratch::BpeScratch() : cache_(std::make_unique<BpeCache>()) {}
BpeScratch::~BpeScratch() = default;

Result<BpeModel> BpeModel::build(const BpeSpec& spec) {
  BpeModel model;
  model.byte_level_ = spec.byte_level;
  model.byte_fallback_ = spec.byte_fallback;
  model.fuse_unk_ = spec.fuse_unk;
  model.ignore_merges_ = spec.ignore_merges;
  model.prefix_ = spec.continuing_subword_prefix;
  model.suffix_ = spec.end_of_word_suffix;
  if (spec.byte_level && (!model.prefix_.empty() || !model.suffix_.empty())) {
    return Error{"model: continuing_subword_prefix / end_of_word_suffix are not supported with a ByteLevel "
                 "pre-tokenizer"};
  }
  int32_t max_id = -1;
  for (const auto& [token, id] : spec.vocab) {
    if (id < 0) return Error{"model.vocab: token '" + std::string(token) + "' has negative id " + std::to_string(id)};
    max_id = std::max(max_id, id);
  }
  model.forbidden_.assign(static_cast<size_t>(max_id) + 1, false);
  for (int32_t id : spec.forbidden_ids)
    if (id >= 0 && id <= max_id) model.forbidden_[id] = true;

  // In byte-level mode the vocabulary is keyed by raw bytes; tokens with characters outside the
  // byte alphabet can never be spelled by input bytes and are kept aside for token lookups.
  std::string byte_arena;
  std::vector<std::pair<std::string_view, int32_t>> entries;
  if (spec.byte_level) {
    std::vector<std::pair<size_t, size_t>> spans;
    std::string bytes;
    for (const auto& [token, id] : spec.vocab) {
      if (byte_level_decode(token, bytes)) {
        spans.emplace_back(byte_arena.size(), bytes.size());
        byte_arena.append(bytes);
        entries.emplace_back(std::string_view(), id);
      } else {
        model.unmapped_.put(token, id);
      }
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      entries[i].first = std::string_view(byte_arena).substr(spans[i].first, spans[i].second);
    }
  } else {
    entries = spec.vocab;
  }
  model.vocab_.put_many(entries.data(), entries.size());
  if (!spec.byte_level && model.prefix_.empty() && model.suffix_.empty() && model.vocab_.find(kWordMark) >= 0) {
    model.split_words_ = std::none_of(spec.vocab.begin(), spec.vocab.end(),
                                      [](const auto& entry) { return has_inner_word_mark(entry.first); });
  }
  auto by_text = [&](std::string_view text) { return model.find_token(text); };
  for (int b = 0; b < 256; ++b) {
    model.byte_ids_[b] = spec.byte_level ? model.lookup(std::string_view(reinterpret_cast<const char*>(&b), 1)) : -1;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = by_text(name);
    model.byte_fallback_ids_[b] = (id >= 0 && !model.forbidden_[id]) ? id : -1;
  }
  if (!spec.unk_token.empty()) {
    model.unk_id_ = by_text(spec.unk_token);
    if (model.unk_id_ < 0) return Error{"model.unk_token '" + spec.unk_token + "' is not in model.vocab"};
  }

  // Resolve every merge's left, right and merged token in bulk (see StringIdMap::find_many),
  // in the alphabet of the lookup keys.
  size_t num_merges = spec.merges.size();
  size_t prefix_len = model.prefix_.size();
  std::string key_arena;
  std::vector<std::pair<size_t, size_t>> key_spans(3 * num_merges);
  std::vector<bool> unmapped(num_merges, false);
  std::string left_key;
  std::string right_key;
  for (size_t rank = 0; rank < num_merges; ++rank) {
    auto [left, right] = spec.merges[rank];
    if (spec.byte_level) {
      if (!byte_level_decode(left, left_key) || !byte_level_decode(right, right_key)) {
        unmapped[rank] = true;  // it can never apply to input bytes
        continue;
      }
    } else {
      left_key.assign(left);
      right_key.assign(right);
    }
    // The merged token drops the right part's continuing_subword_prefix.
    std::string_view right_tail = right_key;
    if (prefix_len > 0 && right_tail.substr(0, prefix_len) == model.prefix_) right_tail.remove_prefix(prefix_len);
    size_t start = key_arena.size();
    key_arena.append(left_key);
    key_arena.append(right_key);
    key_arena.append(left_key);
    key_arena.append(right_tail);
    key_spans[3 * rank] = {start, left_key.size()};
    key_spans[3 * rank + 1] = {start + left_key.size(), right_key.size()};
    key_spans[3 * rank + 2] = {start + left_key.size() + right_key.size(), left_key.size() + right_tail.size()};
  }
  std::vector<std::string_view> keys(3 * num_merges);
  for (size_t k = 0; k < keys.size(); ++k) {
    keys[k] = std::string_view(key_arena).substr(key_spans[k].first, key_spans[k].second);
  }
  std::vector<int32_t> ids(keys.size());
  model.vocab_.find_many(keys.data(), keys.size(), ids.data());
  model.merges_.reserve(num_merges);
  for (size_t rank = 0; rank < num_merges; ++rank) {
    if (unmapped[rank]) continue;
    int32_t left_id = ids[3 * rank];
    int32_t right_id = ids[3 * rank + 1];
    int32_t merged_id = ids[3 * rank + 2];
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      return Error{"model.merges[" + std::to_string(rank) + "]: '" + std::string(spec.merges[rank].first) + " " +
                   std::string(spec.merges[rank].second) + "' uses a token that is not in model.vocab"};
    }
    if (model.forbidden_[merged_id]) continue;
    model.merges_.put((static_cast<uint64_t>(static_cast<uint32_t>(left_id)) << 32) | static_cast<uint32_t>(right_id),
                      (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(merged_id));
  }
  return model;
}

int32_t BpeModel::find_token(std::string_view text) const {
  if (!byte_level_) return vocab_.find(text);
  std::string bytes;
  return byte_level_decode(text, bytes) ? vocab_.find(bytes) : unmapped_.find(text);
}

int32_t BpeModel::lookup(std::string_view key) const {
  int32_t id = vocab_.find(key);
  return (id >= 0 && forbidden_[id]) ? -1 : id;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (byte_level_) {
    bool complete = true;
    for (char c : piece) {
      int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      complete &= id >= 0;
      symbols.push_back(id);
    }
    if (complete) return;
    symbols.clear();
  }
  // Character by character, with Hugging Face's unknown-token bookkeeping: a pending unknown
  // is flushed before the next known symbol (not before byte-fallback symbols).
  int32_t pending_unk = -1;
  std::string key;
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t start = pos;
    pos += byte_level_ ? 1 : utf8_sequence_length(static_cast<uint8_t>(piece[pos]));
    std::string_view unit = piece.substr(start, pos - start);
    int32_t id;
    if (byte_level_) {
      id = byte_ids_[static_cast<uint8_t>(unit[0])];
    } else if (prefix_.empty() && suffix_.empty()) {
      id = lookup(unit);
    } else {
      key.clear();
      if (start > 0) key.append(prefix_);
      key.append(unit);
      if (pos == piece.size()) key.append(suffix_);
      id = lookup(key);
    }
    if (id >= 0) {
      if (pending_unk >= 0) symbols.push_back(pending_unk);
      pending_unk = -1;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : unit) all &= byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : unit) symbols.push_back(byte_fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;
    if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void BpeModel::merge_small(std::vector<int32_t>& symbols, std::vector<uint64_t>& pair_values) const {
  constexpr uint64_t kNone = ~0ull;
  size_t n = symbols.size();
  pair_values.resize(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint64_t* value = find_merge(symbols[i], symbols[i + 1]);
    pair_values[i] = value ? *value : kNone;
  }
  while (n > 1) {
    size_t best = 0;
    uint64_t best_value = kNone;
    for (size_t i = 0; i + 1 < n; ++i) {
      // The rank sits in the high half, so comparing whole values orders by rank; ties keep
      // the leftmost because the comparison is strict.
      if (pair_values[i] < best_value) {
        best_value = pair_values[i];
        best = i;
      }
    }
    if (best_value == kNone) break;
    symbols[best] = static_cast<int32_t>(best_value & 0xFFFFFFFFu);
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best) + 1);
    pair_values.erase(pair_values.begin() + static_cast<ptrdiff_t>(best) + 1);
    --n;
    if (best > 0) {
      const uint64_t* value = find_merge(symbols[best - 1], symbols[best]);
      pair_values[best - 1] = value ? *value : kNone;
    }
    if (best + 1 < n) {
      const uint64_t* value = find_merge(symbols[best], symbols[best + 1]);
      pair_values[best] = value ? *value : kNone;
    }
  }
}

void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  struct Node {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t merged_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  size_t n = symbols.size();
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) {
    nodes[i] = Node{symbols[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || nodes[pos].next < 0) return;
    const uint64_t* value = find_merge(nodes[pos].id, nodes[nodes[pos].next].id);
    if (value) {
      queue.push(Candidate{static_cast<uint32_t>(*value >> 32), static_cast<uint32_t>(pos),
                           static_cast<int32_t>(*value & 0xFFFFFFFFu)});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
  std::vector<bool> removed(n, false);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Node& node = nodes[top.pos];
    if (removed[top.pos] || node.next < 0) continue;
    const uint64_t* value = find_merge(node.id, nodes[node.next].id);
    // A stale candidate: one of its two symbols has changed since it was queued.
    if (value == nullptr || static_cast<int32_t>(*value & 0xFFFFFFFFu) != top.merged_id) continue;
    int32_t right = node.next;
    node.id = top.merged_id;
    removed[right] = true;
    node.next = nodes[right].next;
    if (node.next >= 0) nodes[node.next].prev = static_cast<int32_t>(top.pos);
    push_pair(node.prev);
    push_pair(static_cast<int32_t>(top.pos));
  }
  symbols.clear();
  for (int32_t pos = 0; pos >= 0; pos = nodes[pos].next) symbols.push_back(nodes[pos].id);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    int32_t id = lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (!split_words_) {
    encode_word(piece, out, scratch);
    return;
  }
  // Cut before each U+2581 that follows another character.
  size_t start = 0;
  for (size_t pos = piece.find(kWordMark, 1); pos != std::string_view::npos; pos = piece.find(kWordMark, pos + 1)) {
    bool after_mark = pos >= kWordMark.size() && piece.substr(pos - kWordMark.size(), kWordMark.size()) == kWordMark;
    if (after_mark) continue;
    encode_word(piece.substr(start, pos - start), out, scratch);
    start = pos;
  }
  encode_word(piece.substr(start), out, scratch);
}

void BpeModel::encode_word(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const {
  if (piece.empty()) return;
  bool cacheable = piece.size() <= kCacheMaxPiece;
  uint64_t hash = 0;
  if (cacheable) {
    hash = hash_bytes(piece);
    size_t count = 0;
    if (const int32_t* ids = scratch.cache_->find(piece, hash, count)) {
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  std::vector<int32_t>& symbols = scratch.symbols_;
  initial_symbols(piece, symbols);
  if (symbols.size() <= kSmallWord) {
    merge_small(symbols, scratch.pair_values_);
  } else {
    merge_large(symbols);
  }
  if (cacheable) scratch.cache_->put(piece, hash, symbols.data(), symbols.size());
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace deepinfer::tokenizer
