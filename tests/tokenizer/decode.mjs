// The reference's decode([id]) for each id: what `mha tokenize --vocab` shows each token as,
// before its visible substitutions (docs/tokenizers.md). The decoder alone: no clean-up.
//   node decode.mjs TOKENIZER_JSON IDS_JSON   → a JSON array of strings
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [file, idsFile] = process.argv.slice(2);
const configFile = join(dirname(file), "tokenizer_config.json");
const config = existsSync(configFile) ? JSON.parse(readFileSync(configFile, "utf8")) : {};
const tokenizer = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), config);
const options = { skip_special_tokens: false, clean_up_tokenization_spaces: false };
const out = JSON.parse(readFileSync(idsFile, "utf8")).map((id) => tokenizer.decode([id], options));
process.stdout.write(JSON.stringify(out) + "\n");
