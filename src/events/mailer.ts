// Sends e-mail for e-mail subscriptions through the operator's SMTP server (config: smtp). One connection per
// message (mail is rare: a pool would hold a connection the server drops anyway). The outcome is classified like a
// webhook delivery: delivered, retry later, or failed for good. The password never reaches a log or an error.
import { rootCertificates } from 'node:tls';
import nodemailer from 'nodemailer';
import type { SmtpSettings } from './smtp-settings.js';

export interface MailToSend {
  to: string[];
  subject: string;
  text: string;
  html: string;
}

export type MailOutcome =
  /** The server took the message for every recipient, or for some: `rejected` lists the others (refused for good). */
  | { outcome: 'delivered'; accepted: string[]; rejected: string[] }
  /** Worth trying again later: no connection, a timeout, a 4xx reply, TLS or login trouble an operator can fix. */
  | { outcome: 'retry'; error: string }
  /** The same message would be refused again: a 5xx reply to it (unknown recipient, all recipients refused). */
  | { outcome: 'failed'; error: string };

/** What nodemailer puts on its errors (NodemailerError in its typings). */
interface SmtpError extends Error {
  code?: string;
  responseCode?: number;
  response?: string;
  command?: string;
  rejected?: string[];
}

export class Mailer {
  private readonly transport: ReturnType<typeof nodemailer.createTransport>;

  constructor(private readonly settings: SmtpSettings) {
    this.transport = nodemailer.createTransport({
      host: settings.host,
      port: settings.port,
      secure: settings.tls === 'implicit',
      // starttls: no upgrade, no mail; the password and the message never cross the network in clear.
      requireTLS: settings.tls === 'starttls',
      ignoreTLS: settings.tls === 'none',
      ...(settings.auth && { auth: { user: settings.auth.user, pass: settings.auth.pass } }),
      tls: {
        minVersion: 'TLSv1.2',
        rejectUnauthorized: true,
        // caFile adds to the public roots (a private CA), as workload.caFile does.
        ...(settings.caPem !== undefined && { ca: [...rootCertificates, settings.caPem] }),
      },
      connectionTimeout: settings.timeoutMs,
      greetingTimeout: settings.timeoutMs,
      socketTimeout: settings.timeoutMs,
      dnsTimeout: settings.timeoutMs,
      // nodemailer's logger would print the SMTP dialogue, AUTH included.
      logger: false,
      debug: false,
    });
  }

  async send(mail: MailToSend): Promise<MailOutcome> {
    if (mail.to.length === 0) return { outcome: 'failed', error: 'the message has no recipients' };
    try {
      const info = await this.transport.sendMail({
        from: this.settings.from,
        to: mail.to,
        subject: mail.subject,
        text: mail.text,
        html: mail.html,
        // The message is ours alone: no file or URL in it is to be fetched by the mailer.
        disableFileAccess: true,
        disableUrlAccess: true,
      });
      return {
        outcome: 'delivered',
        accepted: (info.accepted ?? []).map(String),
        rejected: (info.rejected ?? []).map(String),
      };
    } catch (err) {
      return this.classify(err as SmtpError);
    }
  }

  close(): void {
    this.transport.close();
  }

  private classify(err: SmtpError): MailOutcome {
    const code = err.responseCode;
    const where = `SMTP server ${this.settings.host}:${this.settings.port}`;
    let error: string;
    // The server answered STARTTLS with an error reply (a failed handshake after the upgrade has no reply code).
    if (err.code === 'ETLS' && err.command === 'STARTTLS' && err.responseCode !== undefined) {
      error =
        `${where} does not offer STARTTLS; the mail was not sent, so that neither the password nor the message ` +
        `crosses the network in clear (smtp.tls is starttls; use implicit for a TLS port): ${err.message}`;
    } else {
      const parts = [err.message, err.code && `code ${err.code}`, err.command && `command ${err.command}`];
      error = `${where}: ${parts.filter(Boolean).join('; ')}`;
    }
    error = this.redact(error);
    // A login the server refuses, or a 5xx to EHLO/STARTTLS, is the setup's problem, not this message's: the next
    // message would meet it too, and keeping this one queued until an operator fixes it loses nothing.
    const aboutMessage = err.code === 'EENVELOPE' || err.code === 'EMESSAGE';
    if (code !== undefined && code >= 500 && code < 600 && code !== 503 && aboutMessage) {
      return { outcome: 'failed', error };
    }
    if (code === undefined && aboutMessage) return { outcome: 'failed', error };
    return { outcome: 'retry', error };
  }

  /** Belt and braces: no error text carries the password, raw or as AUTH PLAIN/LOGIN would send it. */
  private redact(text: string): string {
    const auth = this.settings.auth;
    if (!auth) return text;
    const forms = [
      auth.pass,
      Buffer.from(auth.pass).toString('base64'),
      Buffer.from(`\u0000${auth.user}\u0000${auth.pass}`).toString('base64'),
    ];
    return forms.reduce((t, secret) => (secret === '' ? t : t.split(secret).join('***')), text);
  }
}

export function createMailer(settings: SmtpSettings): Mailer {
  return new Mailer(settings);
}
