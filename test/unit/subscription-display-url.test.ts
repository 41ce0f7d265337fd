// What of a subscription's URL is shown, listed and audited (src/events/subscription-service.ts, displayUrl): a
// Slack or Teams incoming-webhook URL is its own credential, so its path past the first segment never shows.
import { describe, expect, it } from 'vitest';
import { displayUrl } from '../../src/events/subscription-service.js';

describe('displayUrl', () => {
  it.each([
    ['https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX', 'https://hooks.slack.com/services/…'],
    [
      'https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?sig=SECRET',
      'https://prod-12.westeurope.logic.azure.com/workflows/…',
    ],
    ['https://hooks.example.com/signbridge', 'https://hooks.example.com/signbridge'],
    ['https://hooks.example.com/signbridge?token=SECRET', 'https://hooks.example.com/signbridge/…'],
    ['https://hooks.example.com:8443/', 'https://hooks.example.com:8443'],
    ['mailto:security@example.com', 'mailto:security@example.com'],
    ['not a url', '(not a URL)'],
  ])('%s shows as %s', (url, shown) => {
    expect(displayUrl(url)).toBe(shown);
    expect(displayUrl(url)).not.toMatch(/SECRET|XXXXXXXX/);
  });
});
