// CVSS v3 base scores for vectors whose NVD scores are well known, the Roundup edge, and malformed vectors.
import { describe, expect, it } from 'vitest';
import { CvssError, cvss3BaseScore, cvssRating, roundUp } from '../../src/policy/vulndb/cvss.js';

describe('cvss3BaseScore', () => {
  it.each([
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 9.8, 'CRITICAL'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H', 10, 'CRITICAL'], // Log4Shell
    ['CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H', 7.2, 'HIGH'], // lodash CVE-2021-23337
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H', 7.5, 'HIGH'],
    ['CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H', 7.8, 'HIGH'],
    ['CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:N', 5.9, 'MEDIUM'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N', 6.1, 'MEDIUM'], // typical reflected XSS
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N', 5.3, 'MEDIUM'],
    ['CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H', 9.9, 'CRITICAL'],
    ['CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N', 3.1, 'LOW'],
    ['CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 9.8, 'CRITICAL'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N', 0, 'NONE'],
    // Temporal and environmental metrics are allowed and do not change the base score; order does not matter.
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/E:P/RL:O/RC:C/CR:H/MAV:L', 9.8, 'CRITICAL'],
    ['CVSS:3.1/A:H/I:H/C:H/S:U/UI:N/PR:N/AC:L/AV:N', 9.8, 'CRITICAL'],
  ])('%s = %s', (vector, score, rating) => {
    expect(cvss3BaseScore(vector)).toBe(score);
    expect(cvssRating(cvss3BaseScore(vector))).toBe(rating);
  });

  it('Roundup avoids floating-point noise (spec Appendix A)', () => {
    expect(roundUp(4.0)).toBe(4);
    expect(roundUp(4.02)).toBe(4.1);
    expect(roundUp(4.000000000000001)).toBe(4);
    expect(roundUp(9.999)).toBe(10);
  });

  it.each([
    [
      'AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H',
      '"AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H" is not a CVSS v3 vector (expected a CVSS:3.0/ or CVSS:3.1/ prefix)',
    ],
    [
      'CVSS:2.0/AV:N/AC:L/Au:N/C:P/I:P/A:P',
      '"CVSS:2.0/AV:N/AC:L/Au:N/C:P/I:P/A:P" is not a CVSS v3 vector (expected a CVSS:3.0/ or CVSS:3.1/ prefix)',
    ],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H', '"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H": missing base metrics A'],
    [
      'CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H',
      '"CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H": AV:X is not a valid value',
    ],
    [
      'CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H',
      '"CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H": metric AV appears twice',
    ],
    [
      'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/ZZ:1',
      '"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/ZZ:1": unknown metric ZZ',
    ],
    [
      'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/',
      '"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/": malformed metric ""',
    ],
  ])('rejects %s', (vector, message) => {
    expect(() => cvss3BaseScore(vector)).toThrow(new CvssError(message));
  });
});
