// The settings panel: sampling controls, structured output, tools and the API key, turned into
// the fields of a chat request. Bad input is a SettingsError naming the field; nothing is sent.

export class SettingsError extends Error {}

const field = (id) => document.getElementById(id);

// A number input's value within [min, max], or undefined when it is empty (the server's default).
function number(id, label, { min = -Infinity, max = Infinity, integer = false } = {}) {
  const text = field(id).value.trim();
  if (text === '') return undefined;
  const value = Number(text);
  if (!Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max) {
    const kind = integer ? 'an integer' : 'a number';
    throw new SettingsError(`${label} must be ${kind} in [${min}, ${max}], not '${text}'`);
  }
  return value;
}

function json(id, label) {
  const text = field(id).value.trim();
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new SettingsError(`${label} is not valid JSON: ${error.message}`);
  }
}

// The request's fields besides model and messages.
export function requestOptions(maxModelLen) {
  const options = {
    temperature: number('temperature', 'Temperature', { min: 0, max: 2 }),
    top_p: number('top-p', 'Top-p', { min: 0, max: 1 }),
    max_tokens: number('max-tokens', 'Max tokens', { min: 1, max: maxModelLen ?? 1 << 30, integer: true }),
    seed: number('seed', 'Seed', { min: 0, max: Number.MAX_SAFE_INTEGER, integer: true }),
  };
  const thinking = field('thinking').value;
  if (thinking) options.thinking = { type: thinking };
  if (field('schema-on').checked) {
    const schema = json('schema', 'The JSON schema');
    if (schema === undefined || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new SettingsError('The JSON schema must be a JSON object (or untick structured output)');
    }
    options.response_format = { type: 'json_schema', json_schema: { name: 'playground', strict: true, schema } };
  }
  const tools = json('tools', 'Tools');
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw new SettingsError('Tools must be a JSON array of {"type": "function", ...}');
    if (tools.length) {
      options.tools = tools;
      options.tool_choice = field('tool-choice').value;
    }
  }
  for (const key of Object.keys(options)) if (options[key] === undefined) delete options[key];
  return options;
}

export function systemPrompt() {
  return field('system-prompt').value.trim();
}

// The key lives in this tab's sessionStorage only: it survives a reload, not the tab.
export function apiKey() {
  return field('api-key').value.trim();
}

export function restoreApiKey() {
  field('api-key').value = sessionStorage.getItem('deepinfer.apiKey') ?? '';
}

export function onApiKeyChange(callback) {
  field('api-key').addEventListener('change', () => {
    sessionStorage.setItem('deepinfer.apiKey', apiKey());
    callback();
  });
}
