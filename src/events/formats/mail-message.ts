// An event as an e-mail: the summary's title as the subject, a plain-text part and an HTML part that say the same.
// Every value is escaped in the HTML; the link is the console URL only (no other URL from the event is a link).
import type { EventRecord } from '../../store/records/event-kinds.js';
import { type EventSummary, oneLine, summarizeEvent, summaryText } from './summary.js';

export interface MailContent {
  subject: string;
  text: string;
  html: string;
}

/** Subjects past this are cut: mail clients show less, and a long line folds badly in some of them. */
const MAX_SUBJECT = 200;

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

export function mailMessage(event: EventRecord): MailContent {
  return mailMessageFrom(summarizeEvent(event), event);
}

export function mailMessageFrom(summary: EventSummary, event: Pick<EventRecord, 'id' | 'type'>): MailContent {
  const footer = `signbridge event ${event.id} (${event.type})`;
  const text = `${summaryText(summary)}\n\n-- \n${footer}\n`;
  const rows = summary.facts
    .map(
      (f) =>
        `<tr><th style="text-align:left;vertical-align:top;padding:2px 12px 2px 0">${escapeHtml(f.label)}</th>` +
        `<td style="padding:2px 0">${escapeHtml(f.value)}</td></tr>`,
    )
    .join('\n');
  const link = summary.link
    ? `<p><a href="${escapeHtml(summary.link.url)}">${escapeHtml(summary.link.label)}</a></p>\n`
    : '';
  const html =
    '<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body style="font-family:sans-serif">\n' +
    `<p><strong>${escapeHtml(summary.title)}</strong></p>\n` +
    `<table>\n${rows}\n</table>\n${link}` +
    `<p style="color:#666;font-size:small">${escapeHtml(footer)}</p>\n</body></html>\n`;
  return { subject: oneLine(summary.title, MAX_SUBJECT), text, html };
}
