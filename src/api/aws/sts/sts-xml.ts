// STS's query protocol answers in XML (botocore's `query` parser, the JS SDK's XML deserializer): each result in
// `<Op>Response xmlns=...><Op>Result>` with `ResponseMetadata/RequestId`, each error in
// `ErrorResponse/Error/{Type,Code,Message}` with `RequestId`. Text is escaped here, and characters XML 1.0 cannot
// carry at all (controls, lone surrogates) become U+FFFD: a claim value is the token issuer's, not ours.

export const STS_XML_NAMESPACE = 'https://sts.amazonaws.com/doc/2011-06-15/';
export const STS_CONTENT_TYPE = 'text/xml';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;' };
// Outside XML 1.0's Char production: C0 controls but tab, newline and carriage return, lone surrogates (with the u
// flag a surrogate range matches only unpaired ones), U+FFFE and U+FFFF.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is replaced here
const NOT_XML = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ud800-\udfff\ufffe\uffff]/gu;

export function xmlText(value: string): string {
  // Text content only (no attribute carries a value of the client's): quotes need no escape.
  return value.replace(NOT_XML, '\ufffd').replace(/[&<>]/g, (c) => ESCAPES[c] as string);
}

/** An element: text content is escaped; an array holds child elements made with `element`. */
export function element(name: string, content: string | string[]): string {
  return `<${name}>${Array.isArray(content) ? content.join('') : xmlText(content)}</${name}>`;
}

/** `<Op>Response>` with the result's children and the request id. */
export function resultDocument(operation: string, result: string[], requestId: string): string {
  return (
    `<${operation}Response xmlns="${STS_XML_NAMESPACE}">` +
    element(`${operation}Result`, result) +
    element('ResponseMetadata', [element('RequestId', requestId)]) +
    `</${operation}Response>\n`
  );
}

export function errorDocument(type: 'Sender' | 'Receiver', code: string, message: string, requestId: string): string {
  return (
    `<ErrorResponse xmlns="${STS_XML_NAMESPACE}">` +
    element('Error', [element('Type', type), element('Code', code), element('Message', message)]) +
    element('RequestId', requestId) +
    '</ErrorResponse>\n'
  );
}
