import { createContext } from 'react';

/** What can be done to a message of the conversation (ChatView provides it). */
export interface MessageActions {
  /** A new version of a user message; its branch becomes current. */
  edit(messageId: string, content: string): Promise<void>;
  /** A new reply beside an assistant message. */
  regenerate(messageId: string): Promise<void>;
  /** Shows another version of a message (and the branch below it). */
  selectBranch(messageId: string): Promise<void>;
  /** Opens a new chat holding the branch up to the message. */
  fork(messageId: string): Promise<void>;
}

export const MessageActionsContext = createContext<MessageActions | null>(null);

/** True where the conversation is someone else's, read through a share link. */
export const SharedReadingContext = createContext(false);
