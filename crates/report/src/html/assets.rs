//! The page's inline assets: its stylesheet and its two scripts.

/// The page's stylesheet.
pub(super) const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#1b1f24}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #d0d4da;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f1f3f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.facts th{width:14em}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em}
#results th{cursor:pointer;user-select:none}#results th[data-dir="asc"]::after{content:" ▲"}#results th[data-dir="desc"]::after{content:" ▼"}
tr.st-fail td.status{color:#b00020;font-weight:600}tr.st-pass td.status{color:#17692e}
tr:target{outline:3px solid #f2a900;background:#fff7db}
.controls{display:flex;gap:1em;align-items:center;margin:.5em 0}.controls input{width:22em}
svg{background:#fff;border:1px solid #d0d4da}svg text{font:12px system-ui,sans-serif;fill:#333}
.grid{stroke:#e5e8ec;stroke-width:1}.axis{stroke:#333;stroke-width:1}
.roof-bw{stroke:#1f5fbf;stroke-width:2;fill:none}.roof-c{stroke:#b3471d;stroke-width:2;fill:none}
circle.pt{fill:#2c9a4b;fill-opacity:.8;stroke:#0d4a22;stroke-width:1}circle.pt:hover{fill:#f2a900}
rect.bar{fill:#4f7cc4}rect.gbar{fill:#2c9a4b}rect.gbar.slow{fill:#c4584f}.one{stroke:#555;stroke-dasharray:4 3}
.note{color:#555}.bad{color:#b00020;font-weight:600}.ok{color:#17692e}
#kg-js-status{font-size:.8em;color:#777}#kg-js-errors:empty{display:none}#kg-js-errors{color:#b00020}
"#;

/// Registered first, before anything can fail: every error, rejected promise, `console.error`
/// and CSP violation (an attempted fetch) is written into `#kg-js-errors`, which the browser
/// test reads from the DOM (more robust than scraping browser logs, and visible to a reader).
pub(super) const GUARD_JS: &str = r#"
(function(){
  var pending=[];
  function note(m){
    var ul=document.getElementById('kg-js-errors');
    if(!ul){pending.push(m);return;}
    var li=document.createElement('li');li.textContent=String(m);ul.appendChild(li);
  }
  window.kgNote=note;
  window.addEventListener('error',function(e){note('error: '+(e.message||(e.target&&e.target.tagName)||e.type));},true);
  window.addEventListener('unhandledrejection',function(e){note('unhandled rejection: '+e.reason);});
  document.addEventListener('securitypolicyviolation',function(e){note('blocked by CSP: '+e.violatedDirective+' '+e.blockedURI);});
  var ce=console.error;
  console.error=function(){note('console.error: '+Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};
  document.addEventListener('DOMContentLoaded',function(){var p=pending;pending=[];p.forEach(note);});
})();
"#;

/// Sorting (click a header) and filtering (text and status) of `#results`.
pub(super) const TABLE_JS: &str = r#"
(function(){
  var st=document.getElementById('kg-js-status');
  try{
    var table=document.getElementById('results');
    var body=table.tBodies[0];
    var rows=Array.prototype.slice.call(body.rows);
    var heads=table.tHead.rows[0].cells;
    var filter=document.getElementById('kg-filter');
    var status=document.getElementById('kg-status');
    var shown=document.getElementById('kg-shown');
    function key(r,i,num){
      var c=r.cells[i];var v=c.getAttribute('data-v');
      if(num){var x=parseFloat(v===null?c.textContent:v);return isNaN(x)?null:x;}
      return (v===null?c.textContent:v).toLowerCase();
    }
    Array.prototype.forEach.call(heads,function(th,i){
      th.addEventListener('click',function(){
        var num=th.getAttribute('data-type')==='num';
        var dir=th.getAttribute('data-dir')==='asc'?'desc':'asc';
        Array.prototype.forEach.call(heads,function(h){h.removeAttribute('data-dir');});
        th.setAttribute('data-dir',dir);
        var s=dir==='asc'?1:-1;
        rows.sort(function(a,b){
          var x=key(a,i,num),y=key(b,i,num);
          if(x===y)return 0;if(x===null)return 1;if(y===null)return -1;
          return (x<y?-1:1)*s;
        });
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
    function apply(){
      var q=filter.value.toLowerCase();var want=status.value;var n=0;
      rows.forEach(function(r){
        var s=r.getAttribute('data-status');
        var ok=(want===''||(want==='FAILED'?s!=='PASSED':s===want))&&(q===''||r.textContent.toLowerCase().indexOf(q)>=0);
        r.hidden=!ok;if(ok)n++;
      });
      shown.textContent=n+' of '+rows.length+' rows shown';
    }
    filter.addEventListener('input',apply);status.addEventListener('change',apply);
    apply();
    st.setAttribute('data-state','ok');st.textContent='script ok';
  }catch(e){
    window.kgNote('report script: '+e);
    st.setAttribute('data-state','failed');st.textContent='script failed';
  }
})();
"#;
