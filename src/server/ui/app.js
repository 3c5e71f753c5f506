// The playground page: wires the settings, the conversation, the stop button and the metrics
// to the server's API. body[data-state] is 'loading', 'idle' or 'generating'.
import { Api } from './api.js';
import { Conversation } from './chat.js';
import { pollMetrics } from './metrics.js';
import { SettingsError, apiKey, onApiKeyChange, requestOptions, restoreApiKey, systemPrompt } from './settings.js';

const $ = (id) => document.getElementById(id);

const api = new Api(apiKey);
const conversation = new Conversation($('messages'));
let model = null;        // {id, max_model_len} from /v1/models
let controller = null;   // aborts the streaming request

function setState(state) {
  document.body.dataset.state = state;
  $('send').hidden = state === 'generating';
  $('stop').hidden = state !== 'generating';
}

function showStatus(message, isError = false) {
  const status = $('server-status');
  status.textContent = message;
  status.classList.toggle('error', isError);
}

async function loadModel() {
  try {
    model = await api.model();
    $('model-name').textContent = model.id;
    $('context-length').textContent = model.max_model_len ? `${model.max_model_len.toLocaleString('en')} tokens of context` : '';
    document.title = `${model.id} · deepinfer playground`;
    showStatus('');
  } catch (error) {
    model = null;
    $('model-name').textContent = '?';
    $('context-length').textContent = '';
    if (error.status === 401) $('api-key-row').hidden = false;
    showStatus(error.message, true);
  }
}

async function send(text) {
  $('settings-error').textContent = '';
  let options;
  try {
    options = requestOptions(model?.max_model_len);
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    $('settings-error').textContent = error.message;
    return;
  }
  if (!model) await loadModel();
  const messages = conversation.messages(systemPrompt(), text);
  conversation.addUser(text);
  const reply = conversation.addAssistant(text);
  controller = new AbortController();
  setState('generating');
  try {
    const body = { ...(model ? { model: model.id } : {}), messages, ...options };
    for await (const chunk of api.streamChat(body, controller.signal)) {
      if (chunk.error) throw new Error(chunk.error.message ?? JSON.stringify(chunk.error));
      if (chunk.usage) reply.usage = chunk.usage;
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      const delta = choice.delta ?? {};
      if (delta.reasoning_content) reply.appendReasoning(delta.reasoning_content);
      if (delta.content) reply.appendContent(delta.content);
      for (const call of delta.tool_calls ?? []) reply.appendToolCall(call);
      if (choice.finish_reason) reply.finishReason = choice.finish_reason;
    }
    reply.finish({ stopped: false });
  } catch (error) {
    if (error.name === 'AbortError') {
      reply.finish({ stopped: true });
    } else {
      reply.fail(error.message);
    }
  } finally {
    controller = null;
    setState('idle');
  }
}

function showMetrics({ running, waiting, kvUsage, prefixHitRate }) {
  const percent = (x) => (x === null || x === undefined ? '–' : `${(100 * x).toFixed(1)} %`);
  $('metric-running').textContent = running ?? '–';
  $('metric-waiting').textContent = waiting ?? '–';
  $('metric-kv').textContent = percent(kvUsage);
  $('metric-prefix').textContent = percent(prefixHitRate);
  document.querySelector('.metrics').classList.remove('stale');
}

$('composer').addEventListener('submit', (event) => {
  event.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || controller) return;
  $('prompt').value = '';
  send(text);
});
$('prompt').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $('composer').requestSubmit();
  }
});
$('settings').addEventListener('submit', (event) => event.preventDefault());
$('stop').addEventListener('click', () => controller?.abort());
$('new-chat').addEventListener('click', () => {
  controller?.abort();
  conversation.clear();
  $('prompt').focus();
});

restoreApiKey();
$('api-key-row').hidden = !apiKey();
onApiKeyChange(loadModel);
pollMetrics(api, showMetrics, () => document.querySelector('.metrics').classList.add('stale'));
await loadModel();
setState('idle');
