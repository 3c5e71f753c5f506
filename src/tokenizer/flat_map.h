// Open-addressing hash maps for the tokenizer's hot lookups: merge pairs (u64 -> u64) and
// byte-string keys (string_view -> int32). Both are built once at load and then read-only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

inline uint64_t mix_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  // FNV-1a over 8-byte words, then a final mix: keys are short vocabulary entries.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < s.size(); ++k) tail |= static_cast<uint64_t>(static_cast<uint8_t>(s[i + k])) << (8 * k);
  h = (h ^ tail) * 0x100000001b3ull;
  return mix_hash(h);
}

// u64 -> u64 with linear probing; key kEmpty is reserved.
class FlatU64Map {
 public:
  static constexpr uint64_t kEmpty = ~0ull;

  void reserve(size_t num_keys) {
    size_t capacity = 16;
    while (capacity < num_keys * 2) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, 0});
    mask_ = capacity - 1;
  }
  // Inserts or overwrites.
  void put(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = mix_hash(key) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{key, value};
  }
  const uint64_t* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t i = mix_hash(key) & mask_;
    for (;;) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.value;
      if (slot.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    uint64_t value;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.key != kEmpty) put(slot.key, slot.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Byte-string -> int32 id. Keys are copied into an internal arena; keys of up to 8 bytes are
// also kept in the slot, so most lookups (vocabulary tokens are short) never touch the arena.
class StringIdMap {
 public:
  void reserve(size_t num_keys) {
    size_t capacity = 16;
    while (capacity < num_keys * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  // Inserts or overwrites.
  void put(std::string_view key, int32_t id) { put_hashed(key, hash_bytes(key), id); }
  // put() for many entries, prefetching slots as find_many() does.
  void put_many(const std::pair<std::string_view, int32_t>* entries, size_t num_entries) {
    constexpr size_t kBatch = 32;
    uint64_t hashes[kBatch];
    if ((size_ + num_entries) * 2 > slots_.size()) reserve_more(size_ + num_entries);
    for (size_t base = 0; base < num_entries; base += kBatch) {
      size_t n = num_entries - base < kBatch ? num_entries - base : kBatch;
      for (size_t k = 0; k < n; ++k) {
        hashes[k] = hash_bytes(entries[base + k].first);
        __builtin_prefetch(&slots_[hashes[k] & mask_], 1);
      }
      for (size_t k = 0; k < n; ++k) put_hashed(entries[base + k].first, hashes[k], entries[base + k].second);
    }
  }
  void put_hashed(std::string_view key, uint64_t h, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    uint64_t head = head_of(key);
    size_t i = h & mask_;
    while (slots_[i].id >= 0) {
      if (matches(slots_[i], h, head, key)) {
        slots_[i].id = id;
        return;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{h, head, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
    if (key.size() > 8) arena_.append(key);
    ++size_;
  }
  // Returns -1 when absent.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    return probe(key, hash_bytes(key));
  }
  // find() for many keys, prefetching their slots first: a large table misses the cache on
  // nearly every lookup, and overlapping those misses makes bulk lookups several times faster.
  void find_many(const std::string_view* keys, size_t num_keys, int32_t* ids) const {
    constexpr size_t kBatch = 32;
    uint64_t hashes[kBatch];
    for (size_t base = 0; base < num_keys; base += kBatch) {
      size_t n = num_keys - base < kBatch ? num_keys - base : kBatch;
      for (size_t k = 0; k < n; ++k) {
        hashes[k] = hash_bytes(keys[base + k]);
        if (!slots_.empty()) __builtin_prefetch(&slots_[hashes[k] & mask_]);
      }
      for (size_t k = 0; k < n; ++k) ids[base + k] = slots_.empty() ? -1 : probe(keys[base + k], hashes[k]);
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t head = 0;  // the first 8 bytes of the key, zero-padded
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = -1;
  };
  int32_t probe(std::string_view key, uint64_t h) const {
    uint64_t head = head_of(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (matches(slot, h, head, key)) return slot.id;
    }
  }
  static uint64_t head_of(std::string_view key) {
    uint64_t head = 0;
    __builtin_memcpy(&head, key.data(), key.size() < 8 ? key.size() : 8);
    return head;
  }
  bool matches(const Slot& slot, uint64_t hash, uint64_t head, std::string_view key) const {
    if (slot.hash != hash || slot.head != head || slot.length != key.size()) return false;
    return key.size() <= 8 || std::string_view(arena_).substr(slot.offset, slot.length) == key;
  }
  void grow() { reserve_more(slots_.empty() ? 8 : slots_.size()); }
  void reserve_more(size_t num_keys) {
    std::vector<Slot> old = std::move(slots_);
    reserve(num_keys);
    for (const Slot& slot : old) {
      if (slot.id < 0) continue;
      size_t i = slot.hash & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace deepinfer::tokenizer
