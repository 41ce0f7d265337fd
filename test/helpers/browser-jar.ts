// A minimal browser for the OAuth tests, over real HTTP: keeps cookies per origin, follows redirects by hand,
// reads the IdP's development login and consent forms and submits them. No JavaScript (none is needed here).
export interface Page {
  status: number;
  url: string;
  html: string;
  headers: Headers;
  /** Every Set-Cookie header seen on the way, for checking cookie attributes. */
  setCookies: string[];
}

export class BrowserJar {
  private readonly cookies = new Map<string, Map<string, string>>();
  userAgent = 'signbridge-test-browser';
  /**
   * Origins redirects are followed to; a redirect elsewhere is not followed and its 3xx is returned (an open
   * redirect shows up as that answer instead of a request to a host that does not exist). Empty: any origin.
   */
  stayOn: string[] = [];

  cookieHeader(url: string): string {
    const jar = this.cookies.get(new URL(url).host);
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : '';
  }

  setCookie(url: string, name: string, value: string): void {
    const host = new URL(url).host;
    const jar = this.cookies.get(host) ?? new Map<string, string>();
    this.cookies.set(host, jar);
    jar.set(name, value);
  }

  cookie(url: string, name: string): string | undefined {
    return this.cookies.get(new URL(url).host)?.get(name);
  }

  /** One request; redirects are followed unless `follow` is false. */
  async go(
    url: string,
    init: { method?: string; form?: Record<string, string>; follow?: boolean } = {},
  ): Promise<Page> {
    let current = url;
    let method = init.method ?? 'GET';
    let body: string | undefined = init.form ? new URLSearchParams(init.form).toString() : undefined;
    const setCookies: string[] = [];
    for (let hop = 0; hop < 20; hop++) {
      const headers: Record<string, string> = { 'user-agent': this.userAgent };
      const cookie = this.cookieHeader(current);
      if (cookie) headers.cookie = cookie;
      if (body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
      const res = await fetch(current, { method, headers, body, redirect: 'manual' });
      for (const line of res.headers.getSetCookie()) {
        setCookies.push(line);
        this.store(current, line);
      }
      const location = res.headers.get('location');
      const target = location ? new URL(location, current) : undefined;
      const offSite = target !== undefined && this.stayOn.length > 0 && !this.stayOn.includes(target.origin);
      if (target && res.status >= 300 && res.status < 400 && init.follow !== false && !offSite) {
        current = target.href;
        method = 'GET';
        body = undefined;
        await res.arrayBuffer();
        continue;
      }
      return { status: res.status, url: current, html: await res.text(), headers: res.headers, setCookies };
    }
    throw new Error(`too many redirects from ${url}`);
  }

  /** Submits a page's first form (its action and hidden fields) with `fields` added. */
  async submit(page: Page, fields: Record<string, string> = {}, formIndex = 0): Promise<Page> {
    const forms = [...page.html.matchAll(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/g)];
    const form = forms[formIndex];
    if (!form) throw new Error(`no form on ${page.url}:\n${page.html}`);
    const hidden: Record<string, string> = {};
    for (const input of (form[2] as string).matchAll(/<input[^>]*type="hidden"[^>]*>/g)) {
      const name = /name="([^"]*)"/.exec(input[0])?.[1];
      const value = /value="([^"]*)"/.exec(input[0])?.[1];
      if (name) hidden[name] = unescapeHtml(value ?? '');
    }
    return this.go(new URL(unescapeHtml(form[1] as string), page.url).href, {
      method: 'POST',
      form: { ...hidden, ...fields },
    });
  }

  /**
   * From a page of the IdP: signs in as `login` and consents, then returns the page the service showed after
   * the callback (the IdP's pages are recognised by their hidden "prompt" field).
   */
  async signInAtIdp(page: Page, login: string): Promise<Page> {
    let current = page;
    for (let step = 0; step < 4; step++) {
      const prompt = /name="prompt" value="(\w+)"/.exec(current.html)?.[1];
      if (prompt === 'login') current = await this.submit(current, { login, password: 'any' });
      else if (prompt === 'consent') current = await this.submit(current);
      else return current;
    }
    return current;
  }

  private store(url: string, line: string): void {
    const host = new URL(url).host;
    const [pair, ...attrs] = line.split(';');
    const eq = (pair as string).indexOf('=');
    const name = (pair as string).slice(0, eq).trim();
    const value = (pair as string).slice(eq + 1).trim();
    const jar = this.cookies.get(host) ?? new Map<string, string>();
    this.cookies.set(host, jar);
    const expired = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a) || /^\s*expires=Thu, 01 Jan 1970/i.test(a));
    if (expired || value === '') jar.delete(name);
    else jar.set(name, value);
  }
}

function unescapeHtml(value: string): string {
  return value
    .replaceAll('&amp;', '&')
    .replaceAll('&lt;', '<')
    .replaceAll('&gt;', '>')
    .replaceAll('&quot;', '"')
    .replaceAll('&#39;', "'");
}
