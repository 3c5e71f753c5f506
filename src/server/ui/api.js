// The server's own API, as the page calls it: /v1/models, a streamed /v1/chat/completions and
// /metrics. Every call that the server guards with --api-key carries the key typed into the page.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The API's error shape ({"error": {"message": ...}}), or the status line when the body is not it.
async function errorFrom(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body?.error?.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  if (response.status === 401) message = `${message} (type the server's API key in the settings)`;
  return new ApiError(response.status, message);
}

export class Api {
  // apiKey: a function giving the key typed into the page ('' when none).
  constructor(apiKey) {
    this.apiKey = apiKey;
  }

  headers(extra = {}) {
    const key = this.apiKey();
    return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
  }

  // The served model: {id, max_model_len}.
  async model() {
    const response = await fetch('/v1/models', { headers: this.headers() });
    if (!response.ok) throw await errorFrom(response);
    const body = await response.json();
    if (!body.data?.length) throw new ApiError(500, '/v1/models lists no model');
    return body.data[0];
  }

  async metricsText() {
    const response = await fetch('/metrics');
    if (!response.ok) throw await errorFrom(response);
    return response.text();
  }

  // Streams a chat completion: yields each parsed chunk (OpenAI's chat.completion.chunk, or
  // {error} when the server ends the stream with an error event). signal aborts the request,
  // which the server sees as a disconnect and cancels the generation.
  async *streamChat(body, signal) {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: this.headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
      signal,
    });
    if (!response.ok) throw await errorFrom(response);
    for await (const data of serverSentEvents(response.body)) {
      if (data === '[DONE]') return;
      yield JSON.parse(data);
    }
  }
}

// The data fields of a text/event-stream body, one string per event.
export async function* serverSentEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      if (line === '') {
        if (data.length) yield data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      }
    }
  }
  if (data.length) yield data.join('\n');
}
