// log.witnesses: the witnesses each new checkpoint is sent to (C2SP tlog-witness), by their submission URL and
// cosigner verifier key (docs/transparency.md, "Witnesses"). The URLs are the operator's own configuration, so they
// may point anywhere the operator chooses, internal addresses included.
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../../config-error.js';
import { LOG_SIGNATURE_LINES } from '../signed-note.js';
import { type CosignerKey, parseCosignerKey } from '../verify/cosignature.js';
import { MAX_SIGNATURES } from '../verify/note.js';

/**
 * A signed note holds at most 16 signature lines a verifier must read: the log's own (ECDSA and Ed25519) and 14
 * cosignatures. More witnesses would make a fully cosigned checkpoint one that verifiers refuse.
 */
export const MAX_WITNESSES = MAX_SIGNATURES - LOG_SIGNATURE_LINES;

export const WitnessConfigSchema = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: "the witness's submission prefix" }),
    key: Type.String({ minLength: 1, maxLength: 4096, description: "the witness's cosigner vkey (type 0x04 or 0x06)" }),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'the name in the vkey, if given' })),
  },
  { additionalProperties: false },
);
export type WitnessConfig = Static<typeof WitnessConfigSchema>;

export interface WitnessSettings {
  /** The submission prefix, without a trailing slash: requests go to `${url}/add-checkpoint`. */
  url: string;
  key: CosignerKey;
}

export function witnessSettings(list: readonly WitnessConfig[] | undefined): WitnessSettings[] {
  if (!list) return [];
  if (list.length > MAX_WITNESSES) {
    throw new ConfigError(
      `log.witnesses: at most ${MAX_WITNESSES} (a checkpoint note holds ${MAX_SIGNATURES} signatures, ` +
        `${LOG_SIGNATURE_LINES} of them the log's own)`,
    );
  }
  const names = new Set<string>();
  return list.map((w, i) => {
    let key: CosignerKey;
    try {
      key = parseCosignerKey(w.key);
    } catch (err) {
      throw new ConfigError(`log.witnesses[${i}].key: ${(err as Error).message}`);
    }
    if (w.name !== undefined && w.name !== key.name) {
      throw new ConfigError(`log.witnesses[${i}].name is ${w.name} but its key is named ${key.name}`);
    }
    if (names.has(key.name)) throw new ConfigError(`log.witnesses: ${key.name} is listed twice`);
    names.add(key.name);
    let url: URL;
    try {
      url = new URL(w.url);
    } catch {
      throw new ConfigError(`log.witnesses[${i}].url is not a URL: ${w.url}`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') {
      throw new ConfigError(`log.witnesses[${i}].url must be http(s), got ${url.protocol}`);
    }
    return { url: w.url.replace(/\/+$/, ''), key };
  });
}
