// The reference: @huggingface/tokenizers (pinned in package-lock.json) on the same
// tokenizer.json and texts as `mha tokenize`, printing the same lines.
//   node reference.mjs TOKENIZER_JSON TEXTS_JSON [--no_special_tokens]
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [file, textsFile, flag] = process.argv.slice(2);
const configFile = join(dirname(file), "tokenizer_config.json");
const config = existsSync(configFile) ? JSON.parse(readFileSync(configFile, "utf8")) : {};
const tokenizer = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), config);
const addSpecial = flag !== "--no_special_tokens";
const out = [];
for (const text of JSON.parse(readFileSync(textsFile, "utf8"))) {
  const e = tokenizer.encode(text, { add_special_tokens: addSpecial });
  out.push(JSON.stringify({ ids: e.ids, tokens: e.tokens }));
}
process.stdout.write(out.join("\n") + "\n");
