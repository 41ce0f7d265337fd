// An event for a Slack incoming webhook (and the services that accept its format): `text` is what notifications
// and clients without blocks show; `blocks` the message. Everything in it comes from the summary (summary.ts).
import type { EventRecord } from '../../store/records/event-kinds.js';
import { type EventSummary, summarizeEvent, summaryText } from './summary.js';

export interface SlackMessage {
  text: string;
  blocks: Array<Record<string, unknown>>;
}

/** Slack's limits: 10 fields in a section, 2000 characters in a field, 3000 in a section's text. */
const FIELDS_PER_SECTION = 10;
const MAX_FIELD = 2000;
const MAX_SECTION_TEXT = 3000;

/**
 * Slack reads `&`, `<` and `>` as control characters in text (links, mentions such as <!channel>): text a requester
 * chose (a label, a reason, a project name) is escaped, so it cannot mention, link or break the markup.
 */
export function escapeSlack(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function cut(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function slackMessage(event: EventRecord): SlackMessage {
  return slackMessageFrom(summarizeEvent(event));
}

export function slackMessageFrom(summary: EventSummary): SlackMessage {
  const blocks: Array<Record<string, unknown>> = [
    { type: 'section', text: { type: 'mrkdwn', text: cut(`*${escapeSlack(summary.title)}*`, MAX_SECTION_TEXT) } },
  ];
  for (let i = 0; i < summary.facts.length; i += FIELDS_PER_SECTION) {
    blocks.push({
      type: 'section',
      fields: summary.facts.slice(i, i + FIELDS_PER_SECTION).map((f) => ({
        type: 'mrkdwn',
        text: cut(`*${escapeSlack(f.label)}*\n${escapeSlack(f.value)}`, MAX_FIELD),
      })),
    });
  }
  if (summary.link) {
    blocks.push({
      type: 'actions',
      elements: [
        {
          type: 'button',
          text: { type: 'plain_text', text: summary.link.label },
          url: summary.link.url,
          action_id: 'open_console',
        },
      ],
    });
  }
  return { text: escapeSlack(summaryText(summary)), blocks };
}
