// The reference's normalizer alone on each text (for Precompiled: its approximation, NFKC and
// the spaces and controls SentencePiece's nmt_nfkc map treats, not the map itself).
//   node normalize.mjs TOKENIZER_JSON TEXTS_JSON   → a JSON array of strings
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [file, textsFile] = process.argv.slice(2);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), {});
const normalize = tokenizer.normalizer ?? ((text) => text);
const out = JSON.parse(readFileSync(textsFile, "utf8")).map((text) => normalize(text));
process.stdout.write(JSON.stringify(out) + "\n");
