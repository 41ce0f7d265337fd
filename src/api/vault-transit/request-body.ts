// How a transit write's body is read. Vault reads a write's body as JSON whatever its Content-Type says, and its
// clients rely on that: the Go client (the vault CLI, Terraform's provider, cosign's hashivault://) sends JSON with
// no Content-Type at all, and Vault's own curl examples (`--data @payload.json`) send it as
// `application/x-www-form-urlencoded`. Vault takes a body as a form only when it is sent as one *and* does not start
// like JSON (`{` or `[` after whitespace: isForm in Vault's http/handler.go); signbridge reads JSON only and refuses
// such a form body with a 400 that says so. Otherwise the parsing is the JSON API's own (body limit, valid JSON, no
// prototype keys); its refusals become Vault's 400 in the routes' error handler. The JSON API keeps its parser.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { parseJsonBody } from '../http-strict.js';
import { VaultError } from './errors.js';

const FORM_TYPE = 'application/x-www-form-urlencoded';
/** type/subtype of token characters, then parameters (RFC 9110 8.3.1): what Go's mime.ParseMediaType accepts. */
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
const MEDIA_TYPE = new RegExp(`^[\\t ]*${TOKEN}/${TOKEN}[\\t ]*(;.*)?$`);
const STARTS_LIKE_JSON = /^[ \t\r\n]*[[{]/;

function sentAsForm(request: FastifyRequest): boolean {
  const type = request.headers['content-type'];
  return typeof type === 'string' && type.split(';')[0]?.trim().toLowerCase() === FORM_TYPE;
}

/** Replaces the content-type parsers of the (encapsulated) Vault plugin `app` with "any body is JSON". */
export function readEveryBodyAsJson(app: FastifyInstance): void {
  // A Content-Type that is no media type at all (`garbage`, an empty one) is as good as none to Vault, which then
  // reads JSON; fastify would answer 415 before any parser, so it is set aside before parsing.
  app.addHook('onRequest', (request, _reply, done) => {
    const type = request.headers['content-type'];
    if (type !== undefined && !MEDIA_TYPE.test(type)) delete request.headers['content-type'];
    done();
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (request, text, done) => {
    if (sentAsForm(request) && (text as string).trim() !== '' && !STARTS_LIKE_JSON.test(text as string)) {
      return done(new VaultError(400, ['form-encoded bodies are not supported; send the fields as a JSON object']));
    }
    parseJsonBody(request, text as string, done);
  });
}
