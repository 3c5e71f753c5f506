// The Python semantics chat templates rely on: transformers renders them with Python's Jinja2, so
// tojson is json.dumps(ensure_ascii=False), |trim is str.strip(), "if x" is Python truthiness.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer {

// json.dumps(value, ensure_ascii=False) with the default separators (", ", ": "), or with
// indent >= 0 the indented form (",", ": ", a newline and `indent` spaces per level). Key order is
// kept; floats are written like Python's repr (1.0, 1e-05, 1.5e+16).
std::string python_json(const nlohmann::ordered_json& value, int indent = -1);

// str(value) as Jinja's join and string concatenation see it: strings raw, True/False/None,
// numbers as repr, containers as JSON.
std::string python_str(const nlohmann::ordered_json& value);

// Python truthiness: null, false, 0, "", [] and {} are false.
bool python_truthy(const nlohmann::ordered_json& value);

// s.strip(chars) / s.lstrip(chars) / s.rstrip(chars) for ASCII chars.
std::string_view strip_chars(std::string_view s, std::string_view chars);
std::string_view lstrip_chars(std::string_view s, std::string_view chars);
std::string_view rstrip_chars(std::string_view s, std::string_view chars);

// s.strip() with Python's notion of Unicode whitespace (Jinja's |trim filter).
std::string_view python_trim(std::string_view s);

// len(s): the number of code points of valid UTF-8.
size_t python_len(std::string_view utf8);

}  // namespace deepinfer
