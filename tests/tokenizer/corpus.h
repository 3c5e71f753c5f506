// A deterministic, varied text corpus for tokenizer tests and benchmarks: code, many scripts,
// emoji sequences, combining marks, whitespace runs, long numbers, special-token literals,
// 50 KB strings and random Unicode.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace deepinfer::testing {

// Hand-written samples of every category (short).
const std::vector<std::string>& corpus_samples();

// Literal spellings of special and added tokens of the tokenizers under test.
const std::vector<std::string>& special_literals();

// Random text of num_chars code points from assigned blocks of many scripts (Unicode <= 13, so
// every regex engine agrees on their properties).
std::string random_unicode(std::mt19937_64& rng, size_t num_chars);

// Random concatenation of samples, special literals, random Unicode and whitespace, about
// num_bytes long.
std::string random_mix(std::mt19937_64& rng, size_t num_bytes);

// The full corpus: samples, special-literal contexts, num_random mixes, and (when large) a few
// 50 KB strings.
std::vector<std::string> make_corpus(uint64_t seed, size_t num_random, bool large);

}  // namespace deepinfer::testing
