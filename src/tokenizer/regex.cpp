// PCRE2 binding for tokenizer patterns: Oniguruma translation, JIT compile, per-thread match state.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's \s is Unicode White_Space, which PCRE2's UCP \s lacks U+0085 of; its \h is a hex
// digit. Rewrites those escapes, inside and outside character classes.
std::string translate_oniguruma(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      bool in_class = class_depth > 0;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S') {
        out += in_class ? "\\S" : "[^\\s\\x{85}]";
      } else if (e == 'h') {
        out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else if (e == 'H' && !in_class) {
        out += "[^0-9a-fA-F]";
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

// Per-thread match data and JIT stack, shared by every pattern used on the thread.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_heap_limit(context, 1024 * 1024);  // KiB: the interpreter fallback may use 1 GiB
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern) {
  std::string translated = translate_oniguruma(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return Error{"regex '" + std::string(pattern) + "' does not compile (PCRE2: " + pcre2_message(error_code) +
                 " at offset " + std::to_string(error_offset) + ")"};
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.compiled_ = std::move(compiled);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Result<bool> Regex::find(std::string_view subject, size_t from, RegexMatch& match) const {
  ThreadMatchState& state = thread_match_state();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc;
  if (compiled_->jit) {
    rc = pcre2_jit_match(compiled_->code, data, subject.size(), from, 0, state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(compiled_->code, data, subject.size(), from, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, state.data,
                       state.context);
    }
  } else {
    rc = pcre2_match(compiled_->code, data, subject.size(), from, PCRE2_NO_UTF_CHECK, state.data, state.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    return Error{"regex '" + pattern_ + "' failed on a " + std::to_string(subject.size()) +
                 "-byte input (PCRE2: " + pcre2_message(rc) + ")"};
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  match.start = ovector[0];
  match.end = ovector[1];
  return true;
}

size_t Regex::next_char_length(std::string_view subject, size_t pos) {
  return utf8_sequence_length(static_cast<uint8_t>(subject[pos]));
}

Result<std::string> regex_replace_all(const Regex& regex, std::string_view text, std::string_view content) {
  std::string out;
  size_t last = 0;
  Result<void> status = regex.for_each_match(text, [&](size_t start, size_t end) {
    out.append(text.substr(last, start - last));
    out.append(content);
    last = end;
  });
  if (!status.ok()) return status.error();
  out.append(text.substr(last));
  return out;
}

}  // namespace deepinfer::tokenizer
