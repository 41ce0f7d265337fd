// A certificate subject from the command line (`signbridge cert csr --subject`, `tsa init --subject`), read the way
// `openssl req -utf8 -subj` reads it so a subject pasted from OpenSSL's documentation gives the same name, byte for
// byte: the same attribute names (OpenSSL's short and long names, case as OpenSSL spells them), the same string
// types (UTF8String, but PrintableString for C and serialNumber, IA5String for emailAddress and DC, ... as OpenSSL's
// string table says), `\` escaping the next character, and `+` joining attributes into one multi-valued RDN.
// Where OpenSSL only warns and drops an attribute (an unknown name, an empty value) this refuses, naming it: a
// certificate request missing a part of the subject someone asked for is worse than an error.
// test/tools/certificates.test.ts builds CSRs with it and with `openssl req -subj` and compares the subjects.
import 'reflect-metadata';
import { AsnConvert } from '@peculiar/asn1-schema';
import { AttributeTypeAndValue, AttributeValue, Name, RelativeDistinguishedName } from '@peculiar/asn1-x509';
import * as x509 from '@peculiar/x509';
import { tlv } from '../crypto/der.js';

export class SubjectError extends Error {}

type StringType = 'utf8' | 'printable' | 'ia5' | 'bmp' | 'numeric';

interface AttributeType {
  oid: string;
  /** The ASN.1 string type OpenSSL 3 gives the value (ASN1_STRING_TABLE, with `string_mask = utf8only`). */
  string: StringType;
  min?: number;
  max?: number;
}

const utf8 = (oid: string, max?: number): AttributeType => ({ oid, string: 'utf8', min: 1, ...(max && { max }) });

/**
 * Every attribute name OpenSSL 3.0 knows under the X.520 (2.5.4), PKCS#9 name attributes, RFC 4519/1274 (LDAP,
 * 0.9.2342.19200300.100.1) and EV jurisdiction arcs, short and long name. Other OpenSSL object names (hash and
 * signature algorithms, extensions) are not attribute types and are refused; any other type goes by numeric OID.
 */
const OPENSSL_NAMES: Array<[string, string, AttributeType]> = [
  ['CN', 'commonName', utf8('2.5.4.3', 64)],
  ['SN', 'surname', utf8('2.5.4.4', 32768)],
  ['serialNumber', 'serialNumber', { oid: '2.5.4.5', string: 'printable', min: 1, max: 64 }],
  ['C', 'countryName', { oid: '2.5.4.6', string: 'printable', min: 2, max: 2 }],
  ['L', 'localityName', utf8('2.5.4.7', 128)],
  ['ST', 'stateOrProvinceName', utf8('2.5.4.8', 128)],
  ['street', 'streetAddress', utf8('2.5.4.9')],
  ['O', 'organizationName', utf8('2.5.4.10', 64)],
  ['OU', 'organizationalUnitName', utf8('2.5.4.11', 64)],
  ['title', 'title', utf8('2.5.4.12')],
  ['description', 'description', utf8('2.5.4.13')],
  ['searchGuide', 'searchGuide', utf8('2.5.4.14')],
  ['businessCategory', 'businessCategory', utf8('2.5.4.15')],
  ['postalAddress', 'postalAddress', utf8('2.5.4.16')],
  ['postalCode', 'postalCode', utf8('2.5.4.17')],
  ['postOfficeBox', 'postOfficeBox', utf8('2.5.4.18')],
  ['physicalDeliveryOfficeName', 'physicalDeliveryOfficeName', utf8('2.5.4.19')],
  ['telephoneNumber', 'telephoneNumber', utf8('2.5.4.20')],
  ['telexNumber', 'telexNumber', utf8('2.5.4.21')],
  ['teletexTerminalIdentifier', 'teletexTerminalIdentifier', utf8('2.5.4.22')],
  ['facsimileTelephoneNumber', 'facsimileTelephoneNumber', utf8('2.5.4.23')],
  ['x121Address', 'x121Address', utf8('2.5.4.24')],
  ['internationaliSDNNumber', 'internationaliSDNNumber', utf8('2.5.4.25')],
  ['registeredAddress', 'registeredAddress', utf8('2.5.4.26')],
  ['destinationIndicator', 'destinationIndicator', utf8('2.5.4.27')],
  ['preferredDeliveryMethod', 'preferredDeliveryMethod', utf8('2.5.4.28')],
  ['presentationAddress', 'presentationAddress', utf8('2.5.4.29')],
  ['supportedApplicationContext', 'supportedApplicationContext', utf8('2.5.4.30')],
  ['member', 'member', utf8('2.5.4.31')],
  ['owner', 'owner', utf8('2.5.4.32')],
  ['roleOccupant', 'roleOccupant', utf8('2.5.4.33')],
  ['seeAlso', 'seeAlso', utf8('2.5.4.34')],
  ['userPassword', 'userPassword', utf8('2.5.4.35')],
  ['userCertificate', 'userCertificate', utf8('2.5.4.36')],
  ['cACertificate', 'cACertificate', utf8('2.5.4.37')],
  ['authorityRevocationList', 'authorityRevocationList', utf8('2.5.4.38')],
  ['certificateRevocationList', 'certificateRevocationList', utf8('2.5.4.39')],
  ['crossCertificatePair', 'crossCertificatePair', utf8('2.5.4.40')],
  ['name', 'name', utf8('2.5.4.41', 32768)],
  ['GN', 'givenName', utf8('2.5.4.42', 32768)],
  ['initials', 'initials', utf8('2.5.4.43', 32768)],
  ['generationQualifier', 'generationQualifier', utf8('2.5.4.44')],
  ['x500UniqueIdentifier', 'x500UniqueIdentifier', utf8('2.5.4.45')],
  ['dnQualifier', 'dnQualifier', { oid: '2.5.4.46', string: 'printable' }],
  ['enhancedSearchGuide', 'enhancedSearchGuide', utf8('2.5.4.47')],
  ['protocolInformation', 'protocolInformation', utf8('2.5.4.48')],
  ['distinguishedName', 'distinguishedName', utf8('2.5.4.49')],
  ['uniqueMember', 'uniqueMember', utf8('2.5.4.50')],
  ['houseIdentifier', 'houseIdentifier', utf8('2.5.4.51')],
  ['supportedAlgorithms', 'supportedAlgorithms', utf8('2.5.4.52')],
  ['deltaRevocationList', 'deltaRevocationList', utf8('2.5.4.53')],
  ['dmdName', 'dmdName', utf8('2.5.4.54')],
  ['pseudonym', 'pseudonym', utf8('2.5.4.65')],
  ['role', 'role', utf8('2.5.4.72')],
  ['organizationIdentifier', 'organizationIdentifier', utf8('2.5.4.97')],
  ['c3', 'countryCode3c', { oid: '2.5.4.98', string: 'printable', min: 3, max: 3 }],
  ['n3', 'countryCode3n', { oid: '2.5.4.99', string: 'numeric', min: 3, max: 3 }],
  ['dnsName', 'dnsName', { oid: '2.5.4.100', string: 'utf8' }],
  ['emailAddress', 'emailAddress', { oid: '1.2.840.113549.1.9.1', string: 'ia5', min: 1, max: 128 }],
  ['unstructuredName', 'unstructuredName', utf8('1.2.840.113549.1.9.2')],
  ['challengePassword', 'challengePassword', utf8('1.2.840.113549.1.9.7')],
  ['unstructuredAddress', 'unstructuredAddress', utf8('1.2.840.113549.1.9.8')],
  ['friendlyName', 'friendlyName', { oid: '1.2.840.113549.1.9.20', string: 'bmp' }],
  ['jurisdictionL', 'jurisdictionLocalityName', utf8('1.3.6.1.4.1.311.60.2.1.1')],
  ['jurisdictionST', 'jurisdictionStateOrProvinceName', utf8('1.3.6.1.4.1.311.60.2.1.2')],
  [
    'jurisdictionC',
    'jurisdictionCountryName',
    { oid: '1.3.6.1.4.1.311.60.2.1.3', string: 'printable', min: 2, max: 2 },
  ],
  ...[
    ['UID', 'userId', 1],
    ['textEncodedORAddress', 'textEncodedORAddress', 2],
    ['info', 'info', 4],
    ['favouriteDrink', 'favouriteDrink', 5],
    ['roomNumber', 'roomNumber', 6],
    ['photo', 'photo', 7],
    ['userClass', 'userClass', 8],
    ['host', 'host', 9],
    ['manager', 'manager', 10],
    ['documentIdentifier', 'documentIdentifier', 11],
    ['documentTitle', 'documentTitle', 12],
    ['documentVersion', 'documentVersion', 13],
    ['documentAuthor', 'documentAuthor', 14],
    ['documentLocation', 'documentLocation', 15],
    ['homeTelephoneNumber', 'homeTelephoneNumber', 20],
    ['secretary', 'secretary', 21],
    ['otherMailbox', 'otherMailbox', 22],
    ['lastModifiedTime', 'lastModifiedTime', 23],
    ['lastModifiedBy', 'lastModifiedBy', 24],
    ['aRecord', 'aRecord', 26],
    ['pilotAttributeType27', 'pilotAttributeType27', 27],
    ['mXRecord', 'mXRecord', 28],
    ['nSRecord', 'nSRecord', 29],
    ['sOARecord', 'sOARecord', 30],
    ['cNAMERecord', 'cNAMERecord', 31],
    ['associatedDomain', 'associatedDomain', 37],
    ['associatedName', 'associatedName', 38],
    ['homePostalAddress', 'homePostalAddress', 39],
    ['personalTitle', 'personalTitle', 40],
    ['mobileTelephoneNumber', 'mobileTelephoneNumber', 41],
    ['pagerTelephoneNumber', 'pagerTelephoneNumber', 42],
    ['friendlyCountryName', 'friendlyCountryName', 43],
    ['uid', 'uniqueIdentifier', 44],
    ['organizationalStatus', 'organizationalStatus', 45],
    ['janetMailbox', 'janetMailbox', 46],
    ['mailPreferenceOption', 'mailPreferenceOption', 47],
    ['buildingName', 'buildingName', 48],
    ['dSAQuality', 'dSAQuality', 49],
    ['singleLevelQuality', 'singleLevelQuality', 50],
    ['subtreeMinimumQuality', 'subtreeMinimumQuality', 51],
    ['subtreeMaximumQuality', 'subtreeMaximumQuality', 52],
    ['personalSignature', 'personalSignature', 53],
    ['dITRedirect', 'dITRedirect', 54],
    ['audio', 'audio', 55],
    ['documentPublisher', 'documentPublisher', 56],
  ].map(([short, long, arc]): [string, string, AttributeType] => [
    short as string,
    long as string,
    utf8(`0.9.2342.19200300.100.1.${arc}`),
  ]),
  ['mail', 'rfc822Mailbox', { oid: '0.9.2342.19200300.100.1.3', string: 'ia5', min: 1, max: 256 }],
  ['DC', 'domainComponent', { oid: '0.9.2342.19200300.100.1.25', string: 'ia5', min: 1 }],
];

/** Names this parser took before it followed OpenSSL (@peculiar/x509's, as Windows and RFC 4514 tools write). */
const OTHER_NAMES: Array<[string, string]> = [
  ['E', 'emailAddress'],
  ['G', 'givenName'],
  ['I', 'initials'],
  ['T', 'title'],
];

const exact = new Map<string, AttributeType>();
for (const [short, long, type] of OPENSSL_NAMES) {
  exact.set(short, type);
  exact.set(long, type);
}
for (const [alias, name] of OTHER_NAMES) exact.set(alias, exact.get(name) as AttributeType);
// OpenSSL matches names case-sensitively (UID is userId, uid uniqueIdentifier); another case is taken where it is
// unambiguous (cn, EMAILADDRESS).
const folded = new Map<string, AttributeType | 'ambiguous'>();
for (const [name, type] of exact) {
  const key = name.toLowerCase();
  const seen = folded.get(key);
  folded.set(key, seen === undefined || seen === type ? type : 'ambiguous');
}
const byOid = new Map([...exact.values()].map((type) => [type.oid, type]));

function attributeType(name: string): AttributeType {
  const found = exact.get(name);
  if (found) return found;
  const caseless = folded.get(name.toLowerCase());
  if (caseless && caseless !== 'ambiguous') return caseless;
  if (/^[0-2](\.(0|[1-9]\d*))+$/.test(name)) return byOid.get(name) ?? { oid: name, string: 'utf8', min: 1 };
  if (caseless === 'ambiguous') {
    throw new SubjectError(
      `"${name}" in the subject is ambiguous: write it as OpenSSL does (UID is userId, uid uniqueIdentifier)`,
    );
  }
  throw new SubjectError(
    `unknown attribute type "${name}" in the subject: use a name openssl req -subj knows (C, ST, L, O, OU, CN, ` +
      'emailAddress, serialNumber, street, title, givenName, SN, DC, UID, organizationIdentifier, ...) or a numeric OID (1.2.3.4=value)',
  );
}

/**
 * A distinguished name from the command line, in either of the two forms people paste:
 *   OpenSSL's `/C=DE/O=Example/CN=Release signing` (most significant first, as `openssl req -subj`), or
 *   RFC 4514's `CN=Release signing, O=Example, C=DE` (most significant last).
 * `\` escapes the next character (`\/`, `\,`, `\+`, `\\`); `+` joins attributes into one RDN (`/CN=a+UID=b`).
 */
export function parseSubject(text: string): x509.Name {
  // OpenSSL keeps spaces inside the slash form (`/O= x ` is " x "); the RFC 4514 form trims around separators.
  const slashForm = text.trimStart().startsWith('/');
  const input = slashForm ? text.trimStart() : text.trim();
  if (!input) throw new SubjectError('the subject is empty; give e.g. "/CN=Release signing/O=Example"');
  const rdns = split(slashForm ? input.slice(1) : input, slashForm ? '/' : ',').map((rdn) =>
    split(rdn, '+').map((part) => attribute(part, !slashForm)),
  );
  if (rdns.length === 0) throw new SubjectError(`the subject "${text}" has no attribute`);
  if (!slashForm) rdns.reverse();
  const name = new Name(rdns.map((attributes) => new RelativeDistinguishedName(sortedForDer(attributes))));
  return new x509.Name(AsnConvert.serialize(name));
}

/** `TYPE=value` to an attribute, with OpenSSL's string type and limits for TYPE. */
function attribute(part: string, trimValue: boolean): AttributeTypeAndValue {
  const eq = unescapedIndex(part, '=');
  const name = unescaped(part.slice(0, Math.max(eq, 0))).trim();
  const raw = unescaped(part.slice(eq + 1));
  const value = trimValue ? raw.trim() : raw;
  if (eq <= 0 || name === '') throw new SubjectError(`"${part}" in the subject is not TYPE=value`);
  if (value === '') throw new SubjectError(`${name} in the subject has no value`);
  const type = attributeType(name);
  const length = [...value].length;
  if ((type.min !== undefined && length < type.min) || (type.max !== undefined && length > type.max)) {
    const bounds = type.min === type.max ? `${type.min}` : `${type.min ?? 0} to ${type.max ?? 'any'}`;
    throw new SubjectError(`${name} in the subject must be ${bounds} characters long, not ${length}`);
  }
  const allowed = CHARACTERS[type.string];
  if (!allowed(value)) {
    throw new SubjectError(`${name} in the subject takes ${STRING_NAMES[type.string]} characters only: "${value}"`);
  }
  return new AttributeTypeAndValue({ type: type.oid, value: attributeValue(type.string, value) });
}

const below = (limit: number) => (value: string) => [...value].every((c) => (c.codePointAt(0) as number) < limit);
const CHARACTERS: Record<StringType, (value: string) => boolean> = {
  utf8: () => true,
  printable: (value) => /^[A-Za-z0-9 '()+,\-./:=?]*$/.test(value),
  ia5: below(0x80),
  bmp: below(0x10000),
  numeric: (value) => /^[0-9 ]*$/.test(value),
};
const STRING_NAMES: Record<StringType, string> = {
  utf8: 'UTF-8',
  printable: "PrintableString (A-Z a-z 0-9 space and '()+,-./:=?)",
  ia5: 'ASCII',
  bmp: 'Basic Multilingual Plane',
  numeric: 'digit and space',
};

function attributeValue(string: StringType, value: string): AttributeValue {
  switch (string) {
    case 'printable':
      return new AttributeValue({ printableString: value });
    case 'ia5':
      return new AttributeValue({ ia5String: value });
    case 'bmp':
      return new AttributeValue({ bmpString: value });
    case 'numeric': {
      // No NumericString in AttributeValue's choice: the DER (tag 0x12) as the value's raw encoding.
      const bytes = Buffer.from(value, 'latin1');
      return new AttributeValue({ anyValue: Uint8Array.from(tlv(0x12, bytes)).buffer });
    }
    default:
      return new AttributeValue({ utf8String: value });
  }
}

/** A multi-valued RDN is a SET OF: DER orders its members by their encoding, as OpenSSL writes them. */
function sortedForDer(attributes: AttributeTypeAndValue[]): AttributeTypeAndValue[] {
  const encoded = attributes.map((a) => ({ a, der: Buffer.from(AsnConvert.serialize(a)) }));
  return encoded.sort((x, y) => Buffer.compare(x.der, y.der)).map(({ a }) => a);
}

/** Splits on unescaped `separator`, keeping escapes for the next step; empty parts (`//`, a trailing `/`) dropped. */
function split(text: string, separator: string): string[] {
  const out: string[] = [];
  let current = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i] as string;
    if (c === '\\') {
      if (i + 1 === text.length) throw new SubjectError('the subject ends with an escape character (\\)');
      current += c + (text[i + 1] as string);
      i++;
    } else if (c === separator) {
      out.push(current);
      current = '';
    } else current += c;
  }
  out.push(current);
  return out.filter((p) => p.trim() !== '');
}

function unescapedIndex(text: string, char: string): number {
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === char) return i;
  }
  return -1;
}

function unescaped(text: string): string {
  return text.replace(/\\(.)/gsu, '$1');
}
