/** One event of a text/event-stream: its `event:` name and its `data:` lines joined. */
export interface ServerSentEvent {
  event: string;
  data: string;
}

/**
 * Reads a text/event-stream as it arrives: push() takes any piece of the text and returns
 * the events it completed (an event ends at a blank line). Comments (":" lines) and
 * unknown fields are skipped, as the HTML standard says.
 */
export class EventStreamParser {
  private buffer = '';

  push(text: string): ServerSentEvent[] {
    // A CR LF split across two pieces joins up here, since the buffer keeps the CR.
    this.buffer = (this.buffer + text).replace(/\r\n/g, '\n');
    const events: ServerSentEvent[] = [];
    for (let end = this.buffer.indexOf('\n\n'); end >= 0; end = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const ev = parseBlock(block);
      if (ev) events.push(ev);
    }
    return events;
  }
}

function parseBlock(block: string): ServerSentEvent | null {
  let event = '';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (!event && data.length === 0) return null;
  return { event: event || 'message', data: data.join('\n') };
}
