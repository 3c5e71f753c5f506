// Tokenizer test corpus.
#include "corpus.h"

#include "tokenizer/utf8.h"

#include <utility>

namespace deepinfer::testing {

namespace {

// Blocks whose assignments predate Unicode 14 (PCRE2 10.42's tables).
constexpr std::pair<char32_t, char32_t> kBlocks[] = {
    {0x20, 0x7E},       {0x20, 0x7E},       {0x20, 0x7E},       {0xA0, 0xFF},       {0x100, 0x24F},
    {0x250, 0x2AF},     {0x300, 0x36F},     {0x370, 0x3FF},     {0x400, 0x4FF},     {0x531, 0x587},
    {0x5D0, 0x5EA},     {0x620, 0x64A},     {0x660, 0x669},     {0x905, 0x939},     {0x966, 0x96F},
    {0xE01, 0xE3A},     {0xE50, 0xE59},     {0x10D0, 0x10FA},   {0x1100, 0x1112},   {0x1161, 0x1175},
    {0x2000, 0x200F},   {0x2010, 0x2027},   {0x2030, 0x205E},   {0x20A0, 0x20BF},   {0x2100, 0x214F},
    {0x2190, 0x21FF},   {0x2200, 0x22FF},   {0x2460, 0x24FF},   {0x2500, 0x257F},   {0x3000, 0x303F},
    {0x3041, 0x3096},   {0x30A1, 0x30FA},   {0x4E00, 0x9FA5},   {0x4E00, 0x9FA5},   {0xAC00, 0xD7A3},
    {0xF900, 0xFA2D},   {0xFF01, 0xFF5E},   {0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F}, {0x1F910, 0x1F93A},
    {0x20000, 0x2A6D6}, {0x85, 0x85},       {0x2028, 0x2029},   {0x9, 0xD},
};

}  // namespace

const std::vector<std::string>& corpus_samples() {
  static const std::vector<std::string> samples = {
      // code
      "#include <vector>\nint main() {\n    std::vector<int> v{1, 2, 3};\n    return v.size() > 2 ? 0 : 1;\n}\n",
      "def f(x):\n\tif x >= 10:\n\t\treturn x ** 2  # square\n\treturn [i for i in range(x)]\n",
      "{\"name\": \"deepinfer\", \"values\": [1.5e-3, -42, null, true], \"nested\": {\"k\": \"v\"}}",
      "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%son';",
      "fn main() -> Result<(), Box<dyn Error>> { let x: &'static str = \"hi\"; Ok(()) }",
      "<html><body class=\"main\"><p>Hello&nbsp;world</p></body></html>",
      "x=a&&b||!c; y+=1; z<<=2; w>>>=3; s = `${a}::${b}`;",
      "https://example.com/path?query=1&lang=en#frag user@example.org",
      // scripts
      "The quick brown fox jumps over the lazy dog.",
      "我们今天在北京开会，讨论大模型推理引擎的设计。",
      "日本語のテキストとカタカナ、ひらがなを混ぜた文章です。",
      "한국어 문장도 토큰화해야 합니다.",
      "Привет, мир! Это тест токенизатора.",
      "Γειά σου Κόσμε· ΑΒΓΔ αβγδ",
      "مرحبا بالعالم، هذا اختبار.",
      "שלום עולם",
      "नमस्ते दुनिया, यह एक परीक्षण है।",
      "สวัสดีชาวโลก นี่คือการทดสอบ",
      "ქართული ენა",
      // emoji sequences
      "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🇫🇷🇯🇵 flags, ❤️‍🔥, 🧑🏿‍💻, 1️⃣ #️⃣",
      "😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉",
      // combining marks, normalization
      "e\xCC\x81 n\xCC\x83 a\xCC\x8A \xC3\xA9 \xC3\xB1 \xC3\xA5",
      "Z\xCD\x91\xCD\x97\xCC\xBD" "a\xCC\xBE\xCD\x8Bl\xCD\x80g\xCC\x8Do\xCC\x83",
      "\xE2\x84\xAB \xE2\x84\xA6 \xEF\xAC\x81 \xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8 \xEF\xA4\x80 \xC3\x85",
      "ﬁ ﬂ ① ½ Ⅻ ㎏ ｆｕｌｌｗｉｄｔｈ",
      // whitespace
      "a  b   c    d\t\te\n\nf\r\ng \n h",
      "   leading and trailing   ",
      "\n\n\n",
      "\xC2\xA0no-break\xC2\xA0space\xE3\x80\x80ideographic\xE2\x80\x80" "en-quad",
      "next\xC2\x85line\xE2\x80\xA8line-sep\xE2\x80\xA9para-sep\xE2\x80\x8Bzero-width",
      "tab\tthen  \t  mixed \r\n\r\n runs\x0B\x0C",
      // numbers
      "1234567890123456789012345678901234567890",
      "3.14159265358979 1,000,000 -42 +7 1e10 0x1F 0b1010",
      "\xD9\xA3\xD9\xA4\xD9\xA5 \xE0\xA5\xA7\xE0\xA5\xA8 \xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93 ²³",
      "2024-01-15T10:30:00Z v1.2.3",
      // contractions and case
      "I'm sure they'll say we'd've DONE IT, but it's HE'S and you're. It’s curly.",
      "camelCaseWord PascalCase snake_case SCREAMING_CASE kebab-case",
      "!!!??? ... --- *** /// \\\\ ||| ~~~ ^^^",
      "",
      " ",
      "a",
  };
  return samples;
}

const std::vector<std::string>& special_literals() {
  static const std::vector<std::string> literals = {
      "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
      "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜tool▁calls▁begin｜>",
      "<|EOT|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<s>", "</s>", "<unk>",
      "<0x41>", "<|reserved_special_token_5|>", "<|fim_prefix|>",
  };
  return literals;
}

std::string random_unicode(std::mt19937_64& rng, size_t num_chars) {
  std::string out;
  std::uniform_int_distribution<size_t> block_pick(0, std::size(kBlocks) - 1);
  for (size_t i = 0; i < num_chars; ++i) {
    auto [lo, hi] = kBlocks[block_pick(rng)];
    std::uniform_int_distribution<uint32_t> cp(lo, hi);
    tokenizer::append_utf8(out, cp(rng));
  }
  return out;
}

std::string random_mix(std::mt19937_64& rng, size_t num_bytes) {
  const auto& samples = corpus_samples();
  const auto& literals = special_literals();
  static const char* const kSpaces[] = {" ", "  ", "\n", "\n\n", "\t", " \n ", "    ", "\r\n", "\xC2\xA0"};
  std::string out;
  std::uniform_int_distribution<int> kind(0, 9);
  while (out.size() < num_bytes) {
    switch (kind(rng)) {
      case 0:
      case 1:
      case 2: {
        const std::string& sample = samples[rng() % samples.size()];
        size_t start = sample.empty() ? 0 : rng() % sample.size();
        size_t length = 1 + rng() % 40;
        // Cut on character boundaries.
        while (start > 0 && (static_cast<uint8_t>(sample[start]) & 0xC0) == 0x80) --start;
        size_t end = std::min(sample.size(), start + length);
        while (end < sample.size() && (static_cast<uint8_t>(sample[end]) & 0xC0) == 0x80) ++end;
        out += sample.substr(start, end - start);
        break;
      }
      case 3: out += literals[rng() % literals.size()]; break;
      case 4:
      case 5: out += random_unicode(rng, 1 + rng() % 12); break;
      case 6: out += kSpaces[rng() % std::size(kSpaces)]; break;
      case 7: out += std::to_string(rng() % 100000000); break;
      case 8: out += std::string(1 + rng() % 6, " \n\t-_=*#"[rng() % 8]); break;
      default: out += "word" + std::to_string(rng() % 100) + " "; break;
    }
  }
  return out;
}

std::vector<std::string> make_corpus(uint64_t seed, size_t num_random, bool large) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> corpus = corpus_samples();
  for (const std::string& literal : special_literals()) {
    corpus.push_back(literal);
    corpus.push_back("x" + literal + "y");
    corpus.push_back(" " + literal + " ");
    corpus.push_back("hello" + literal + literal + "\nworld " + literal);
  }
  for (size_t i = 0; i < num_random; ++i) corpus.push_back(random_mix(rng, 8 + rng() % 400));
  for (size_t i = 0; i < num_random / 4; ++i) corpus.push_back(random_unicode(rng, 1 + rng() % 64));
  if (large) {
    corpus.push_back(random_mix(rng, 50 * 1024));
    corpus.push_back(random_unicode(rng, 20 * 1024));
    corpus.push_back(std::string(5000, ' ') + "x" + std::string(3000, '\n') + std::string(2000, '\t') + "end");
    std::string digits;
    for (int i = 0; i < 20000; ++i) digits.push_back(static_cast<char>('0' + rng() % 10));
    corpus.push_back(digits);
  }
  return corpus;
}

}  // namespace deepinfer::testing
