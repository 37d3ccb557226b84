import type { ReactNode } from 'react';
import { MenuIcon } from './icons';
import type { TopBarProps } from './Shell';

export function TopBar({
  bar,
  title,
  children,
}: {
  bar: TopBarProps;
  title: ReactNode;
  children?: ReactNode;
}) {
  return (
    <header className="topbar">
      <button
        type="button"
        id="menu-button"
        className="icon-btn menu-btn"
        aria-label="Chats"
        aria-controls="sidebar"
        aria-expanded={bar.menuOpen}
        onClick={bar.onMenu}
      >
        <MenuIcon />
      </button>
      <h1 className="topbar-title">{title}</h1>
      <div className="topbar-actions">{children}</div>
    </header>
  );
}
