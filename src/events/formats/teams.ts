// An event for a Microsoft Teams Workflows webhook ("Post to a channel when a webhook request is received"): a
// message with one Adaptive Card 1.4. Office 365 connectors and their MessageCards are retired and no longer render.
// Text goes into RichTextBlock/TextRun elements, which Adaptive Cards never read as Markdown: a requester's label
// such as "[click](https://evil.example)" shows as those characters, not as a link (TextBlock and FactSet would
// render it).
import type { EventRecord } from '../../store/records/event-kinds.js';
import { type EventSummary, summarizeEvent } from './summary.js';

export interface TeamsMessage {
  type: 'message';
  attachments: Array<{
    contentType: 'application/vnd.microsoft.card.adaptive';
    content: Record<string, unknown> & { type: 'AdaptiveCard'; version: '1.4'; body: unknown[]; actions?: unknown[] };
  }>;
}

const run = (text: string, extra: Record<string, unknown> = {}) => ({ type: 'TextRun', text, ...extra });

export function teamsMessage(event: EventRecord): TeamsMessage {
  return teamsMessageFrom(summarizeEvent(event));
}

export function teamsMessageFrom(summary: EventSummary): TeamsMessage {
  const body: unknown[] = [
    { type: 'RichTextBlock', inlines: [run(summary.title, { weight: 'Bolder', size: 'Medium' })] },
    ...summary.facts.map((f, i) => ({
      type: 'RichTextBlock',
      ...(i === 0 && { separator: true }),
      inlines: [run(`${f.label}: `, { weight: 'Bolder' }), run(f.value)],
    })),
  ];
  return {
    type: 'message',
    attachments: [
      {
        contentType: 'application/vnd.microsoft.card.adaptive',
        content: {
          $schema: 'http://adaptivecards.io/schemas/adaptive-card.json',
          type: 'AdaptiveCard',
          version: '1.4',
          // A summary line for notifications and screen readers.
          fallbackText: summary.title,
          body,
          ...(summary.link && {
            actions: [{ type: 'Action.OpenUrl', title: summary.link.label, url: summary.link.url }],
          }),
        },
      },
    ],
  };
}
