// Token bytes from a tokenizer's vocabulary and the pre-order trie over them.
#include "grammar/token_vocab.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "core/check.h"
#include "grammar/token_classes.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {

namespace {

// GPT-2's byte_to_unicode, inverted: code point -> byte, or -1.
const std::array<int, 512>& byte_level_inverse() {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t;
    t.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[printable ? b : 256 + extra++] = b;
    }
    return t;
  }();
  return table;
}

// Next code point of UTF-8 text at i (advances i); -1 when malformed.
int64_t next_codepoint(const std::string& s, size_t& i) {
  const auto c = static_cast<uint8_t>(s[i]);
  const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return -1;
  int64_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

bool decode_sentencepiece(const std::string& token, std::string& out) {
  out.clear();
  if (token.size() == 6 && token.rfind("<0x", 0) == 0 && token.back() == '>') {
    out.push_back(static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
    return true;
  }
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kSpace.size(), kSpace) == 0) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(token[i++]);
    }
  }
  return true;
}

}  // namespace

bool decode_byte_level(const std::string& token, std::string& out) {
  out.clear();
  const auto& inverse = byte_level_inverse();
  for (size_t i = 0; i < token.size();) {
    const int64_t cp = next_codepoint(token, i);
    if (cp < 0 || cp >= 512 || inverse[cp] < 0) return false;
    out.push_back(static_cast<char>(inverse[cp]));
  }
  return true;
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids, int32_t mask_size)
    : token_bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)),
      mask_size_(std::max<int32_t>(mask_size, static_cast<int32_t>(token_bytes_.size()))),
      token_classes_(std::make_shared<TokenClassCache>()) {
  for (int32_t id : stop_ids_) {
    DI_CHECK(id >= 0 && id < mask_size_, "stop id " << id);
    if (id < num_tokens()) token_bytes_[id].clear();
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < num_tokens(); ++id) {
    if (!token_bytes_[id].empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return token_bytes_[a] < token_bytes_[b]; });
  Trie& t = trie_;
  t.byte.push_back(0);
  t.depth.push_back(0);
  t.subtree_end.push_back(0);
  t.tokens_begin.push_back(0);
  std::vector<int32_t> path = {0};  // node of each depth along the current string
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = token_bytes_[id];
    if (s.size() > kMaxTokenBytes) continue;
    size_t lcp = 0;
    if (prev) {
      while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (path.size() > lcp + 1) {
      t.subtree_end[path.back()] = static_cast<int32_t>(t.byte.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      const auto node = static_cast<int32_t>(t.byte.size());
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.subtree_end.push_back(0);
      t.tokens_begin.push_back(static_cast<int32_t>(t.token_ids.size()));
      path.push_back(node);
    }
    t.max_depth = std::max<int32_t>(t.max_depth, static_cast<int32_t>(s.size()));
    t.token_ids.push_back(id);
    prev = &s;
  }
  while (!path.empty()) {
    t.subtree_end[path.back()] = static_cast<int32_t>(t.byte.size());
    path.pop_back();
  }
  // Sentinel so tokens of node i are token_ids[tokens_begin[i] .. tokens_begin[i + 1]).
  t.tokens_begin.push_back(static_cast<int32_t>(t.token_ids.size()));
}

std::string special_token_bytes(int32_t id) {
  DI_CHECK(id >= 0 && id < (1 << 24), "added token id " << id);
  return {'\xFF', static_cast<char>(id >> 16), static_cast<char>((id >> 8) & 0xFF), static_cast<char>(id & 0xFF)};
}

bool TokenVocab::is_stop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

Result<TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tokenizer, int32_t mask_size,
                                              std::vector<int32_t> stop_ids) {
  const int32_t n = tokenizer.vocab_size();
  if (mask_size != 0 && mask_size < n) {
    return Error{"grammar: the logits have " + std::to_string(mask_size) + " entries but the tokenizer has " +
                 std::to_string(n) + " tokens"};
  }
  const bool byte_level = tokenizer.token_to_id("\xC4\xA0").has_value();  // "Ġ", GPT-2's space
  std::vector<std::string> bytes(n);
  std::string decoded;
  for (int32_t id = 0; id < n; ++id) {
    const auto token = tokenizer.id_to_token(id);
    if (!token || token->empty()) continue;
    if (tokenizer.is_special(id) || tokenizer.find_added_token(*token) == id) {
      bytes[id] = special_token_bytes(id);
      continue;
    }
    const bool ok = byte_level ? decode_byte_level(*token, decoded) : decode_sentencepiece(*token, decoded);
    // 0xFF begins no UTF-8 sequence, so no grammar needs it: it is kept for added tokens.
    if (ok && decoded.find('\xFF') == std::string::npos) bytes[id] = decoded;
  }
  if (stop_ids.empty() && tokenizer.eos_id()) stop_ids.push_back(*tokenizer.eos_id());
  return TokenVocab(std::move(bytes), std::move(stop_ids), mask_size == 0 ? n : mask_size);
}

}  // namespace deepinfer::grammar
