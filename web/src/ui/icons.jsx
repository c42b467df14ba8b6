// Stroke icons (24×24, currentColor), drawn inline: no image requests.
const paths = {
  inbox: 'M22 12h-6l-2 3h-4l-2-3H2 M5.45 5.11 2 12v6a2 2 0 0 0 2 2h16a2 2 0 0 0 2-2v-6l-3.45-6.89A2 2 0 0 0 16.76 4H7.24a2 2 0 0 0-1.79 1.11z',
  board: 'M3 5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2v14a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2z M9 3v18 M15 3v18',
  runs: 'M13 2 3 14h9l-1 8 10-12h-9l1-8z',
  fleet: 'M2 4h20v6H2z M2 14h20v6H2z M6 7h.01 M6 17h.01',
  search: 'M11 19a8 8 0 1 0 0-16 8 8 0 0 0 0 16z M21 21l-4.35-4.35',
  plus: 'M12 5v14 M5 12h14',
  x: 'M18 6 6 18 M6 6l12 12',
  menu: 'M3 6h18 M3 12h18 M3 18h18',
  stop: 'M6 6h12v12H6z',
  retry: 'M1 4v6h6 M3.51 15a9 9 0 1 0 2.13-9.36L1 10',
  check: 'M20 6 9 17l-5-5',
  keyboard: 'M2 6h20v12H2z M6 10h.01 M10 10h.01 M14 10h.01 M18 10h.01 M7 14h10',
  bell: 'M18 8a6 6 0 0 0-12 0c0 7-3 9-3 9h18s-3-2-3-9 M13.73 21a2 2 0 0 1-3.46 0',
  logout: 'M9 21H5a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h4 M16 17l5-5-5-5 M21 12H9',
  terminal: 'M4 17l6-6-6-6 M12 19h8',
  grip: 'M9 5h.01 M9 12h.01 M9 19h.01 M15 5h.01 M15 12h.01 M15 19h.01',
  play: 'M6 4l14 8-14 8z',
  chevron: 'M9 18l6-6-6-6',
  back: 'M15 18l-6-6 6-6',
  copy: 'M9 9h11v11H9z M5 15H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1h10a1 1 0 0 1 1 1v1',
  edit: 'M12 20h9 M16.5 3.5a2.12 2.12 0 0 1 3 3L7 19l-4 1 1-4z',
  trash: 'M3 6h18 M8 6V4h8v2 M19 6l-1 14H6L5 6',
  lock: 'M5 11h14v10H5z M8 11V7a4 4 0 0 1 8 0v4',
  unlock: 'M5 11h14v10H5z M8 11V7a4 4 0 0 1 7.9-1',
  key: 'M21 2l-2 2m-7.61 7.61a5.5 5.5 0 1 1-7.78 7.78 5.5 5.5 0 0 1 7.78-7.78zm0 0L15.5 7.5m0 0 3 3L22 7l-3-3m-3.5 3.5L19 4',
  power: 'M18.36 6.64a9 9 0 1 1-12.73 0 M12 2v10',
  archive: 'M21 8v13H3V8 M1 3h22v5H1z M10 12h4',
  undo: 'M3 7v6h6 M21 17a9 9 0 0 0-15-6.7L3 13',
  more: 'M12 12h.01 M19 12h.01 M5 12h.01',
  link: 'M10 13a5 5 0 0 0 7.54.54l3-3a5 5 0 0 0-7.07-7.07l-1.72 1.71 M14 11a5 5 0 0 0-7.54-.54l-3 3a5 5 0 0 0 7.07 7.07l1.71-1.71',
};

/** Icon draws one of the named stroke icons. */
export function Icon({ name, size = 16, class: cls = '' }) {
  return (
    <svg class={'icon ' + cls} width={size} height={size} viewBox="0 0 24 24" fill="none" stroke="currentColor"
      stroke-width="2" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true">
      <path d={paths[name] || ''} />
    </svg>
  );
}
