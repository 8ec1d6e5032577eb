// The official OpenAI client (npm "openai", scripts/node-openai.sh) against
// the router: node openai_client.js BASE_URL MODEL CHECK [KEY]. Prints one
// line of JSON with what it saw; exits 1 on an unexpected failure.
//   chat         one chat completion (temperature 0)
//   stream       the same streamed: the pieces and their concatenation
//   completion   a text completion
//   models       the model list
//   unknown      a request for a model that is not there: the error's shape
//   embedding    an embedding
const OpenAI = require("openai");
const [base, model, check, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key || "none", maxRetries: 0, timeout: 60000 });
const msgs = [{ role: "user", content: "Say hi" }];
async function main() {
  let out;
  if (check === "chat") {
    const r = await client.chat.completions.create({ model, messages: msgs, temperature: 0, max_tokens: 8 });
    out = { content: r.choices[0].message.content, finish: r.choices[0].finish_reason, object: r.object };
  } else if (check === "stream") {
    const s = await client.chat.completions.create({ model, messages: msgs, temperature: 0, max_tokens: 8, stream: true });
    const pieces = [];
    for await (const ev of s) {
      const d = ev.choices && ev.choices[0] && ev.choices[0].delta;
      if (d && d.content) pieces.push(d.content);
    }
    out = { pieces: pieces.length, content: pieces.join("") };
  } else if (check === "completion") {
    const r = await client.completions.create({ model, prompt: "Hello", temperature: 0, max_tokens: 8 });
    out = { text: r.choices[0].text, object: r.object };
  } else if (check === "models") {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    out = { ids };
  } else if (check === "embedding") {
    const r = await client.embeddings.create({ model, input: "hi", encoding_format: "float" });
    out = { dims: r.data[0].embedding.length };
  } else if (check === "unknown") {
    try {
      await client.chat.completions.create({ model, messages: msgs });
      out = { error: null };
    } catch (e) {
      out = { status: e.status, code: e.code, type: e.type, message: e.message, name: e.constructor.name };
    }
  } else {
    throw new Error("unknown check " + check);
  }
  console.log(JSON.stringify(out));
}
main().catch((e) => {
  console.log(JSON.stringify({ failed: String(e), status: e.status }));
  process.exit(1);
});
