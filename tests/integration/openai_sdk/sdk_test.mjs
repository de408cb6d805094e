// The official OpenAI SDK (npm "openai", pinned in package.json) against Cohort's gateway.
// Run by tests/integration/serve_test.cc with COHORT_GATEWAY (the head's URL), COHORT_TOKEN
// (a Cohort token, the SDK's apiKey), COHORT_MODEL and NODE_EXTRA_CA_CERTS (the head's CA).
// Prints one line per check and exits non-zero on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = `${process.env.COHORT_GATEWAY}/v1`;
const model = process.env.COHORT_MODEL;
const client = new OpenAI({ baseURL, apiKey: process.env.COHORT_TOKEN, maxRetries: 0, timeout: 60_000 });

function ok(what) {
  console.log(`ok ${what}`);
}

const models = await client.models.list();
assert.ok(models.data.some((m) => m.id === model), `models.list has ${model}: ${JSON.stringify(models.data)}`);
ok('models.list');

const done = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0 });
assert.equal(done.object, 'text_completion');
assert.equal(done.usage.completion_tokens, 8);
assert.equal(done.choices[0].finish_reason, 'length');
ok('completions.create');

const stream = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0, stream: true });
let streamed = '';
let chunks = 0;
const streamedIds = [];
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.text ?? '';
  streamedIds.push(...(chunk.choices[0]?.token_ids ?? []));
  chunks += 1;
}
assert.equal(streamed, done.choices[0].text);
assert.equal(chunks, 8);
ok('completions.create stream');

const lp = await client.completions.create({ model, prompt: 'Hello', max_tokens: 3, temperature: 0, logprobs: 2 });
assert.equal(lp.choices[0].logprobs.tokens.length, 3);
assert.equal(Object.keys(lp.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
ok('completions.create logprobs');

// logit_bias: a ban (-100) of the greedy first token (its id from the stream's token_ids)
// makes greedy decoding start with another; a key that is not a token id is a 400 naming it.
assert.equal(streamedIds.length, 8);
const biased = await client.completions.create({
  model, prompt: 'Hello', max_tokens: 8, temperature: 0, stream: true, logit_bias: { [streamedIds[0]]: -100 },
});
const biasedIds = [];
for await (const chunk of biased) biasedIds.push(...(chunk.choices[0]?.token_ids ?? []));
assert.equal(biasedIds.length, 8);
assert.notEqual(biasedIds[0], streamedIds[0], `the banned token ${streamedIds[0]} came first`);
await expectError(OpenAI.BadRequestError, 400, 'logit_bias.Hello',
  () => client.completions.create({ model, prompt: 'x', logit_bias: { Hello: 5 } }));
ok('completions.create logit_bias');

// lm-evaluation-harness's loglikelihood request (vLLM's echo contract), through the
// gateway: the prompt alone, its tokens with log-probabilities (the first null) and
// character offsets; then echo before a completion, streamed and not.
const prompt = 'Hello, world';
const ll = await client.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0 });
assert.equal(ll.choices[0].text, prompt);
const l = ll.choices[0].logprobs;
assert.equal(l.tokens.join(''), prompt);
assert.equal(l.token_logprobs[0], null);
assert.ok(l.token_logprobs.slice(1).every((v) => typeof v === 'number' && v <= 0), JSON.stringify(l.token_logprobs));
assert.deepEqual(l.text_offset, [...Array(prompt.length).keys()]);
const echoed = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0, echo: true });
assert.equal(echoed.choices[0].text, 'Hello' + done.choices[0].text);
const echoStream = await client.completions.create({
  model, prompt: 'Hello', max_tokens: 8, temperature: 0, echo: true, logprobs: 1, stream: true,
});
let echoText = '';
const echoLogprobs = [];
for await (const chunk of echoStream) {
  echoText += chunk.choices[0]?.text ?? '';
  echoLogprobs.push(...(chunk.choices[0]?.logprobs?.token_logprobs ?? []));
}
assert.equal(echoText, 'Hello' + done.choices[0].text);
assert.equal(echoLogprobs.length, 5 + 8);
assert.equal(echoLogprobs[0], null);
ok('completions.create echo');

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0 });
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices[0].message.role, 'assistant');
ok('chat.completions.create');

const chatStream = await client.chat.completions.create({
  model, messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let chatText = '';
let usage = null;
for await (const chunk of chatStream) {
  chatText += chunk.choices[0]?.delta?.content ?? '';
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(chatText, chat.choices[0].message.content);
assert.equal(usage.completion_tokens, 6);
ok('chat.completions.create stream');

async function expectError(cls, status, param, call) {
  try {
    await call();
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, status);
    if (param !== undefined) assert.equal(e.param, param);
    return e;
  }
  assert.fail(`expected ${cls.name}`);
}
await expectError(OpenAI.NotFoundError, 404, 'model', () => client.completions.create({ model: 'no-such-model', prompt: 'x' }));
await expectError(OpenAI.BadRequestError, 400, 'max_tokens',
  () => client.completions.create({ model, prompt: 'x', max_tokens: 1_000_000 }));
await expectError(OpenAI.BadRequestError, 400, 'temperature',
  () => client.chat.completions.create({ model, messages, temperature: 7 }));
const stranger = new OpenAI({ baseURL, apiKey: 'cohort_not-a-token', maxRetries: 0 });
// The head's own refusal, in OpenAI's shape too (it had no type or param).
const denied = await expectError(OpenAI.AuthenticationError, 401, null, () => stranger.models.list());
assert.equal(denied.type, 'authentication_error');
await expectError(OpenAI.AuthenticationError, 401, null,
  () => stranger.completions.create({ model, prompt: 'x', max_tokens: 1 }));
ok('errors');

// The gateway still serves after the errors.
const after = await client.completions.create({ model, prompt: 'Hello', max_tokens: 8, temperature: 0 });
assert.equal(after.choices[0].text, done.choices[0].text);
ok('serving after errors');
