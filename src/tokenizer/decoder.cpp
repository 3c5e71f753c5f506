// Decoder stages. Each stage reads either whole tokens ("token mode") or, once a Fuse or
// ByteLevel stage upstream has joined everything into one string, consecutive chunks of that one
// string ("fused mode"); its output follows the same two modes. Stages hold back only what a
// later token could still change, so streaming output equals Hugging Face's one-shot decode.
#include "tokenizer/decoder.h"

#include "tokenizer/bpe_model.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

class DecodeStage {
 public:
  virtual ~DecodeStage() = default;
  virtual void push(std::string_view text) = 0;
  virtual void finish() { finish_next(); }
  virtual bool output_fused() const { return input_fused_; }

  void connect(DecodeStage* next, std::string** sink, bool input_fused) {
    next_ = next;
    sink_ = sink;
    input_fused_ = input_fused;
  }

 protected:
  void emit(std::string_view text) {
    if (next_ != nullptr) {
      next_->push(text);
    } else {
      (*sink_)->append(text);
    }
  }
  void finish_next() {
    if (next_ != nullptr) next_->finish();
  }
  bool input_fused_ = false;

 private:
  DecodeStage* next_ = nullptr;
  std::string** sink_ = nullptr;
};

namespace {

// Characters of text as (offset, length) without decoding them.
template <typename F>
void for_each_char(std::string_view text, F&& fn) {
  for (size_t pos = 0; pos < text.size();) {
    size_t len = utf8_sequence_length(static_cast<uint8_t>(text[pos]));
    fn(text.substr(pos, len));
    pos += len;
  }
}

class ByteLevelStage : public DecodeStage {
 public:
  void push(std::string_view text) override {
    if (input_fused_) {
      held_.append(text);
      return;
    }
    append_token_bytes(text);
  }
  void finish() override {
    if (input_fused_) append_token_bytes(held_);
    out_.clear();
    utf8_.finish(out_);
    if (!out_.empty()) emit(out_);
    finish_next();
  }
  bool output_fused() const override { return true; }

 private:
  // A token with a character outside the byte alphabet is taken as its own UTF-8 bytes.
  void append_token_bytes(std::string_view token) {
    std::string_view bytes = byte_level_decode(token, bytes_) ? std::string_view(bytes_) : token;
    out_.clear();
    utf8_.push(bytes, out_);
    if (!out_.empty()) emit(out_);
  }
  std::string held_;
  std::string bytes_;
  std::string out_;
  Utf8LossyStream utf8_;
};

class MetaspaceStage : public DecodeStage {
 public:
  MetaspaceStage(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void push(std::string_view text) override {
    // In fused mode everything is token 0.
    bool first = input_fused_ || index_ == 0;
    ++index_;
    out_.clear();
    for_each_char(text, [&](std::string_view c) {
      if (c != replacement_) {
        out_.append(c);
      } else if (!(first && strip_first_)) {
        out_.push_back(' ');
      }
    });
    emit(out_);
  }

 private:
  std::string replacement_;
  bool strip_first_;
  size_t index_ = 0;
  std::string out_;
};

// "<0xHH>" -> the byte, following Rust's u8::from_str_radix(token[3..5], 16).
std::optional<uint8_t> parse_byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  char a = token[3];
  char b = token[4];
  if (a == '+' && digit(b) >= 0) return static_cast<uint8_t>(digit(b));
  if (digit(a) < 0 || digit(b) < 0) return std::nullopt;
  return static_cast<uint8_t>(digit(a) * 16 + digit(b));
}

class ByteFallbackStage : public DecodeStage {
 public:
  void push(std::string_view text) override {
    if (input_fused_) {
      // Only a fused string that is exactly one byte token is converted; hold 6 bytes to know.
      if (passthrough_) {
        emit(text);
        return;
      }
      held_.append(text);
      if (held_.size() > 6) {
        passthrough_ = true;
        emit(held_);
        held_.clear();
      }
      return;
    }
    if (std::optional<uint8_t> byte = parse_byte_token(text)) {
      run_.push_back(static_cast<char>(*byte));
      return;
    }
    flush_run();
    emit(text);
  }
  void finish() override {
    if (input_fused_) {
      if (!passthrough_) {
        if (std::optional<uint8_t> byte = parse_byte_token(held_)) {
          run_.push_back(static_cast<char>(*byte));
        } else if (!held_.empty()) {
          emit(held_);
        }
      }
      held_.clear();
    }
    flush_run();
    finish_next();
  }

 private:
  // A run of byte tokens becomes one string when it is valid UTF-8, else one U+FFFD per byte.
  void flush_run() {
    if (run_.empty()) return;
    if (find_invalid_utf8(run_) == SIZE_MAX) {
      emit(run_);
    } else {
      for (size_t i = 0; i < run_.size(); ++i) emit(kReplacementChar);
    }
    run_.clear();
  }
  std::string run_;
  std::string held_;
  bool passthrough_ = false;
};

class FuseStage : public DecodeStage {
 public:
  void push(std::string_view text) override { emit(text); }
  bool output_fused() const override { return true; }
};

class StripStage : public DecodeStage {
 public:
  StripStage(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void push(std::string_view text) override {
    if (!input_fused_) {
      emit(strip_token(text));
      return;
    }
    out_.clear();
    for_each_char(text, [&](std::string_view c) {
      if (left_to_cut_ > 0) {
        if (c == content_) {
          --left_to_cut_;
          return;
        }
        left_to_cut_ = 0;
      }
      if (c == content_) {
        ++num_held_;
        return;
      }
      for (; num_held_ > 0; --num_held_) out_.append(content_);
      out_.append(c);
    });
    if (!out_.empty()) emit(out_);
  }
  void finish() override {
    if (input_fused_) {
      out_.clear();
      for (size_t i = stop_; i < num_held_; ++i) out_.append(content_);
      if (!out_.empty()) emit(out_);
    }
    finish_next();
  }

 private:
  std::string strip_token(std::string_view token) {
    std::vector<std::string_view> chars;
    for_each_char(token, [&](std::string_view c) { chars.push_back(c); });
    size_t begin = 0;
    while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
    size_t end = chars.size();
    for (size_t i = 0; i < stop_ && end > begin && chars[end - 1] == content_; ++i) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) out.append(chars[i]);
    return out;
  }
  std::string content_;
  size_t start_;
  size_t stop_;
  size_t left_to_cut_ = start_;
  size_t num_held_ = 0;
  std::string out_;
};

class ReplaceStage : public DecodeStage {
 public:
  ReplaceStage(const std::optional<Regex>& regex, std::string pattern, std::string content)
      : regex_(regex), pattern_(std::move(pattern)), content_(std::move(content)) {}
  void push(std::string_view text) override {
    if (!input_fused_) {
      emit(replace(text));
      return;
    }
    held_.append(text);
    if (regex_) return;  // a regex match may span any distance: decided at finish
    // Replace whole occurrences; keep a tail that could still begin one.
    std::string out;
    size_t last = 0;
    for (size_t pos = held_.find(pattern_); pos != std::string::npos; pos = held_.find(pattern_, last)) {
      out.append(held_, last, pos - last);
      out.append(content_);
      last = pos + pattern_.size();
    }
    size_t keep_from = std::max(last, held_.size() >= pattern_.size() ? held_.size() - pattern_.size() + 1 : 0);
    while (keep_from < held_.size() && (static_cast<uint8_t>(held_[keep_from]) & 0xC0) == 0x80) --keep_from;
    out.append(held_, last, keep_from - last);
    held_.erase(0, keep_from);
    if (!out.empty()) emit(out);
  }
  void finish() override {
    if (input_fused_ && !held_.empty()) emit(replace(held_));
    held_.clear();
    finish_next();
  }

 private:
  std::string replace(std::string_view token) const {
    if (regex_) {
      Result<std::string> replaced = regex_replace_all(*regex_, token, content_);
      // A regex that gives up on a token leaves the token as it is.
      return replaced.ok() ? std::move(replaced).value() : std::string(token);
    }
    std::string out;
    size_t last = 0;
    for (size_t pos = token.find(pattern_); pos != std::string_view::npos; pos = token.find(pattern_, last)) {
      out.append(token.substr(last, pos - last));
      out.append(content_);
      last = pos + pattern_.size();
    }
    out.append(token.substr(last));
    return out;
  }
  std::optional<Regex> regex_;
  std::string pattern_;
  std::string content_;
  std::string held_;
};

// No decoder: tokens joined by single spaces.
class JoinStage : public DecodeStage {
 public:
  void push(std::string_view text) override {
    if (!first_) emit(" ");
    first_ = false;
    emit(text);
  }
  bool output_fused() const override { return true; }

 private:
  bool first_ = true;
};

std::unique_ptr<DecodeStage> make_stage(const DecoderStep& step) {
  switch (step.kind) {
    case DecoderStep::Kind::kByteLevel: return std::make_unique<ByteLevelStage>();
    case DecoderStep::Kind::kMetaspace: return std::make_unique<MetaspaceStage>(step.text, step.strip_first);
    case DecoderStep::Kind::kByteFallback: return std::make_unique<ByteFallbackStage>();
    case DecoderStep::Kind::kFuse: return std::make_unique<FuseStage>();
    case DecoderStep::Kind::kStrip: return std::make_unique<StripStage>(step.text, step.start, step.stop);
    case DecoderStep::Kind::kReplace: return std::make_unique<ReplaceStage>(step.regex, step.text, step.content);
  }
  return nullptr;
}

}  // namespace

DecodeStream::DecodeStream(const std::optional<std::vector<DecoderStep>>& steps)
    : sink_(std::make_unique<std::string*>(nullptr)) {
  if (!steps) {
    stages_.push_back(std::make_unique<JoinStage>());
  } else {
    for (const DecoderStep& step : *steps) stages_.push_back(make_stage(step));
  }
  bool fused = false;
  for (size_t i = 0; i < stages_.size(); ++i) {
    DecodeStage* next = i + 1 < stages_.size() ? stages_[i + 1].get() : nullptr;
    stages_[i]->connect(next, sink_.get(), fused);
    fused = stages_[i]->output_fused();
  }
}

DecodeStream::~DecodeStream() = default;
DecodeStream::DecodeStream(DecodeStream&&) noexcept = default;
DecodeStream& DecodeStream::operator=(DecodeStream&&) noexcept = default;

void DecodeStream::push(std::string_view token, std::string& out) {
  if (stages_.empty()) {
    out.append(token);
    return;
  }
  *sink_ = &out;
  stages_.front()->push(token);
  *sink_ = nullptr;
}

void DecodeStream::finish(std::string& out) {
  if (stages_.empty()) return;
  *sink_ = &out;
  stages_.front()->finish();
  *sink_ = nullptr;
}

}  // namespace deepinfer::tokenizer
