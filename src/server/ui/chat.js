// The conversation: the messages on screen and the history the next request sends. Model output
// is only ever inserted as text (textContent), never as HTML.

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class Conversation {
  constructor(list) {
    this.list = list;
    this.turns = [];  // {role, content} of the exchanges that completed or were stopped
    this.epoch = 0;   // counts clears: a reply stopped by "New chat" must not join the new history
  }

  clear() {
    this.epoch += 1;
    this.turns = [];
    this.list.replaceChildren();
  }

  // The messages of the next request: the system prompt, the earlier turns, the new user text.
  messages(system, userText) {
    const messages = system ? [{ role: 'system', content: system }] : [];
    return [...messages, ...this.turns, { role: 'user', content: userText }];
  }

  addUser(text) {
    const item = element('li', 'message user');
    item.append(element('div', 'role', 'you'), element('div', 'content', text));
    this.list.append(item);
    item.scrollIntoView({ block: 'end' });
  }

  // The reply being streamed; once it ends (even stopped), its exchange joins the history.
  addAssistant(userText) {
    const item = element('li', 'message assistant');
    this.list.append(item);
    const epoch = this.epoch;
    return new AssistantMessage(item, (content) => {
      if (epoch === this.epoch) this.turns.push({ role: 'user', content: userText }, { role: 'assistant', content });
    });
  }
}

// One streamed reply: reasoning (collapsible, apart from the answer), the answer, tool calls, and a
// line of figures: tokens, tokens/s, time to the first token, prompt tokens, why it ended.
export class AssistantMessage {
  constructor(item, onDone) {
    this.item = item;
    this.onDone = onDone;
    this.started = performance.now();
    this.firstTokenAt = null;
    this.lastTokenAt = null;
    this.chunks = 0;  // streamed pieces, a token count's estimate when the server sent no usage
    this.usage = null;
    this.finishReason = null;
    this.toolCalls = [];

    this.item.append(element('div', 'role', 'model'));
    this.reasoning = element('details', 'reasoning');
    this.reasoning.open = true;
    this.reasoningSummary = element('summary', '', 'reasoning');
    this.reasoningText = element('div', 'reasoning-text');
    this.reasoning.append(this.reasoningSummary, this.reasoningText);
    this.reasoning.hidden = true;
    this.content = element('div', 'content');
    this.calls = element('div', 'tool-calls');
    this.stats = element('p', 'stats', 'waiting for the first token…');
    this.item.append(this.reasoning, this.content, this.calls, this.stats);
    this.item.dataset.state = 'streaming';
  }

  tick() {
    const now = performance.now();
    if (this.firstTokenAt === null) this.firstTokenAt = now;
    this.lastTokenAt = now;
    this.chunks += 1;
    this.stats.textContent = `${this.chunks} pieces…`;
    this.item.scrollIntoView({ block: 'end' });
  }

  appendReasoning(text) {
    this.reasoning.hidden = false;
    this.reasoningText.textContent += text;
    this.tick();
  }

  appendContent(text) {
    // The answer began: fold the reasoning away, saying how long it took.
    if (!this.reasoning.hidden && this.reasoning.open && this.content.textContent === '') {
      this.reasoning.open = false;
      this.reasoningSummary.textContent = `reasoning (${seconds(performance.now() - this.started)})`;
    }
    this.content.textContent += text;
    this.tick();
  }

  // A streamed tool-call piece: {index, id?, function: {name?, arguments?}}.
  appendToolCall(delta) {
    const index = delta.index ?? 0;
    let call = this.toolCalls[index];
    if (!call) {
      const box = element('div', 'tool-call');
      const name = element('div', 'tool-name');
      const args = element('pre', 'tool-arguments');
      box.append(name, args);
      this.calls.append(box);
      call = this.toolCalls[index] = { name: '', arguments: '', nameNode: name, argsNode: args };
    }
    if (delta.function?.name) call.name += delta.function.name;
    if (delta.function?.arguments) call.arguments += delta.function.arguments;
    call.nameNode.textContent = `tool call: ${call.name}`;
    call.argsNode.textContent = call.arguments;
    this.tick();
  }

  finish({ stopped }) {
    this.item.dataset.state = stopped ? 'stopped' : 'done';
    for (const call of this.toolCalls) {
      try {
        call.argsNode.textContent = JSON.stringify(JSON.parse(call.arguments), null, 2);
      } catch {
        // arguments cut short (stopped, or max_tokens): shown as they came
      }
    }
    const parts = [];
    const tokens = this.usage?.completion_tokens;
    parts.push(tokens !== undefined ? `${tokens} tokens` : `≈${this.chunks} tokens`);
    const count = tokens ?? this.chunks;
    if (count > 1 && this.lastTokenAt > this.firstTokenAt) {
      // Decode speed: the tokens after the first over the time after the first.
      parts.push(`${((count - 1) / ((this.lastTokenAt - this.firstTokenAt) / 1000)).toFixed(1)} tok/s`);
    }
    if (this.firstTokenAt !== null) parts.push(`first token ${Math.round(this.firstTokenAt - this.started)} ms`);
    if (this.usage?.prompt_tokens !== undefined) parts.push(`prompt ${this.usage.prompt_tokens} tokens`);
    parts.push(stopped ? 'stopped' : this.finishReason ?? 'ended');
    this.stats.textContent = parts.join(' · ');
    if (tokens !== undefined) this.item.dataset.completionTokens = String(tokens);
    if (stopped || this.content.textContent || this.toolCalls.length) this.onDone(this.content.textContent);
  }

  fail(message) {
    this.item.dataset.state = 'failed';
    this.stats.textContent = '';
    this.item.append(element('p', 'error', message));
  }
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}
