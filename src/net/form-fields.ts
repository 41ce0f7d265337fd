// The one reader of application/x-www-form-urlencoded bodies: the console's and the sign-in pages' forms, POST
// /oauth/token and STS's query protocol. Decoding is the WHATWG URL standard's (URLSearchParams), for every door
// alike: `+` is a space, a bad percent sequence stays as written, bytes that are not UTF-8 become U+FFFD, an empty
// value is the empty string and a name with no `=` has one. What differs per door is a field sent twice, so that is
// the caller's option. Body size limits stay with each route (fastify's bodyLimit), where the body is read.

export interface FormOptions {
  /**
   * A field given more than once: the error to throw (each door's own, e.g. RFC 6749 §3.1's invalid_request, STS's
   * InvalidParameterValue). Without it the last value counts, as the browser forms' readers always did.
   */
  refuseRepeated?: (name: string) => Error;
}

/** The fields of a form body, in the order of their first appearance. */
export function formFields(body: string | Buffer, options: FormOptions = {}): Map<string, string> {
  const fields = new Map<string, string>();
  const text = typeof body === 'string' ? body : body.toString('utf8');
  for (const [name, value] of new URLSearchParams(text)) {
    if (options.refuseRepeated && fields.has(name)) throw options.refuseRepeated(name);
    fields.set(name, value);
  }
  return fields;
}

/** formFields as a plain object (what fastify hands a route as its body and its schema validates). */
export function formObject(body: string | Buffer, options: FormOptions = {}): Record<string, string> {
  return Object.fromEntries(formFields(body, options));
}
