/**
 * The dashboard's stylesheet, served as a file (the CSP allows no inline style): light and dark
 * themes from the system's preference, tables that scroll sideways on a phone, cards that wrap.
 *
 * @since 0.1.0
 */

/** The stylesheet. */
export const stylesheet = `
:root{--bg:#f7f7f8;--fg:#1c1d21;--muted:#5d6170;--card:#fff;--line:#dfe1e6;--accent:#2457c5;--ok:#1d7a3e;--warn:#9a6200;--bad:#b42318;--chart:#2457c5;--wait:#c9ced8;--queue:#e0a93a;--ran:#2f8f55;--fail:#c2413b;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#14161a;--fg:#e6e8ec;--muted:#a0a6b4;--card:#1d2026;--line:#323741;--accent:#7ea6ff;--ok:#5cc887;--warn:#e8b04a;--bad:#ff7a70;--chart:#7ea6ff;--wait:#464c58;--queue:#c7922b;--ran:#3fae6c;--fail:#e0605a}}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:var(--bg);color:var(--fg)}
a{color:var(--accent);text-decoration:none}a:hover{text-decoration:underline}
header.top{display:flex;flex-wrap:wrap;align-items:center;gap:.25rem 1rem;padding:.6rem 1rem;background:var(--card);border-bottom:1px solid var(--line)}
header.top .brand{font-weight:700;color:var(--fg);margin-right:.5rem}
nav.pages{display:flex;flex-wrap:wrap;gap:.15rem .8rem}
nav.pages a{padding:.15rem 0;color:var(--muted)}nav.pages a.here{color:var(--fg);font-weight:600;border-bottom:2px solid var(--accent)}
header.top .who{margin-left:auto;color:var(--muted);font-size:.85em}
main{padding:1rem;max-width:1400px;margin:0 auto}
h1{font-size:1.35rem;margin:.2rem 0 .8rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
p.lead,.muted{color:var(--muted)}
.flash{margin:.8rem 1rem 0;padding:.55rem .8rem;border-radius:6px;border:1px solid var(--line);background:var(--card)}
.flash.ok{border-color:var(--ok)}.flash.error{border-color:var(--bad);color:var(--bad)}
.verdict{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:baseline;padding:.7rem 1rem;border-radius:8px;border:1px solid var(--line);background:var(--card);margin-bottom:1rem}
.verdict strong{font-size:1.2rem}.verdict.OK strong{color:var(--ok)}.verdict.DEGRADED strong{color:var(--warn)}.verdict.STALLED strong,.verdict.ERROR strong{color:var(--bad)}
.verdict ul{margin:0;padding-left:1.1rem;flex-basis:100%}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:.8rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.7rem .9rem}
.card .k{color:var(--muted);font-size:.85em}.card .v{font-size:1.6rem;font-weight:650}.card p{margin:.2rem 0 0;color:var(--muted);font-size:.85em}
.scroll{overflow-x:auto;background:var(--card);border:1px solid var(--line);border-radius:8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.4rem .6rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:.85em;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:last-child td{border-bottom:0}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em}
pre{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.6rem;overflow:auto;max-height:24rem;white-space:pre-wrap;word-break:break-word}
.badge{display:inline-block;padding:0 .45rem;border-radius:999px;font-size:.8em;border:1px solid var(--line);white-space:nowrap}
.s-ok,.s-healthy,.s-finished,.s-completed,.s-published{color:var(--ok);border-color:var(--ok)}
.s-degraded,.s-late,.s-paused,.s-waiting,.s-retrying,.s-pending,.s-scheduled{color:var(--warn);border-color:var(--warn)}
.s-stalled,.s-error,.s-stale,.s-failed,.s-cancelled,.s-failing,.s-dead{color:var(--bad);border-color:var(--bad)}
form.act{display:inline-flex;flex-wrap:wrap;gap:.3rem;margin:.1rem .3rem .1rem 0;align-items:center}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:flex-end;margin:0 0 .8rem}
form.filters label{display:flex;flex-direction:column;font-size:.8em;color:var(--muted)}
input,select,textarea,button{font:inherit;color:inherit;background:var(--card);border:1px solid var(--line);border-radius:5px;padding:.25rem .45rem;max-width:100%}
textarea{width:100%;min-height:4rem}
button{cursor:pointer;border-color:var(--accent);color:var(--accent)}button.danger{border-color:var(--bad);color:var(--bad)}
button:hover{background:var(--bg)}
.stack>*+*{margin-top:.6rem}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:1rem}
figure.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.5rem .7rem}
figure.chart figcaption{font-size:.85em;color:var(--muted)}
svg .line{stroke:var(--chart);stroke-width:2;vector-effect:non-scaling-stroke}
svg .bar{fill:var(--chart)}
svg .seg.waited{fill:var(--wait)}svg .seg.queued{fill:var(--queue)}svg .seg.ran{fill:var(--ran)}svg .seg.failed{fill:var(--fail)}svg .seg.waiting{fill:var(--wait)}
.timeline{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.5rem .7rem}
.tl-row{display:grid;grid-template-columns:minmax(6rem,14rem) 1fr;gap:.6rem;align-items:center;font-size:.85em}
.tl-label{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
#actions{margin:.6rem 0 1rem}
details.data summary{cursor:pointer;font-size:.8em;color:var(--muted)}
.meter{display:inline-block;width:80px;height:8px;border-radius:4px;background:var(--line);vertical-align:middle;overflow:hidden}
.meter svg{display:block}
.meter .fill{fill:var(--chart)}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;word-break:break-word}
.legend span{margin-right:.8rem;font-size:.8em}.legend i{display:inline-block;width:.8em;height:.8em;margin-right:.25em;vertical-align:-1px}
.legend .waited{background:var(--wait)}.legend .queued{background:var(--queue)}.legend .ran{background:var(--ran)}.legend .failed{background:var(--fail)}
@media (max-width:700px){main{padding:.6rem}header.top{padding:.5rem .6rem}.card .v{font-size:1.3rem}th,td{padding:.35rem .4rem}h1{font-size:1.15rem}}
`
