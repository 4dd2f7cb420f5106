
(function(){
document.body.classList.add('js');
var secs=[].slice.call(document.querySelectorAll('section.task'));
var items=[].slice.call(document.querySelectorAll('#task-list li'));
var f={domain:document.getElementById('f-domain'),a:document.getElementById('f-a'),b:document.getElementById('f-b'),
 disagree:document.getElementById('f-disagree'),fwf:document.getElementById('f-fwf'),
 failed:document.getElementById('f-failed')};
var cur=-1;
function data(s,k){return JSON.parse(s.getAttribute('data-'+k));}
function matches(s){
 if(f.domain.value&&s.getAttribute('data-domain')!==f.domain.value)return false;
 var app=data(s,'app');
 if(f.a.value!==''&&app[+f.a.value]!==1)return false;
 if(f.b.value!==''&&app[+f.b.value]!==0)return false;
 if(f.disagree.checked&&!data(s,'disagree').length)return false;
 if(f.fwf.checked&&!data(s,'fwf').length)return false;
 if(f.failed.checked&&!data(s,'failed').length)return false;
 return true;}
function visible(){return secs.map(function(s,i){return matches(s)?i:-1;}).filter(function(i){return i>=0;});}
function show(i){
 cur=i;secs.forEach(function(s,j){s.classList.toggle('shown',j===i);});
 items.forEach(function(li,j){li.classList.toggle('cur',j===i);});
 save();}
function save(){
 var q=new URLSearchParams();
 ['domain','a','b'].forEach(function(k){if(f[k].value!=='')q.set(k,f[k].value);});
 ['disagree','fwf','failed'].forEach(function(k){if(f[k].checked)q.set(k,'1');});
 if(cur>=0)q.set('task',secs[cur].getAttribute('data-task'));
 try{history.replaceState(null,'','?'+q.toString());}catch(e){}}
function apply(){
 var vis=visible(),n=0;
 items.forEach(function(li,j){var on=vis.indexOf(j)>=0;li.hidden=!on;if(on)n++;});
 document.getElementById('count').textContent=n+' of '+secs.length+' tasks';
 document.getElementById('none').hidden=n>0;
 if(vis.indexOf(cur)<0)show(vis.length?vis[0]:-1);else save();}
function step(d){var vis=visible(),k=vis.indexOf(cur);if(vis.length)show(vis[(k+d+vis.length)%vis.length]);}
var q=new URLSearchParams(location.search);
['domain','a','b'].forEach(function(k){if(q.has(k))f[k].value=q.get(k);});
['disagree','fwf','failed'].forEach(function(k){f[k].checked=q.get(k)==='1';});
var want=q.get('task');if(location.hash.indexOf('#task-')===0)cur=+location.hash.slice(6);
secs.forEach(function(s,i){if(s.getAttribute('data-task')===want)cur=i;});
Object.keys(f).forEach(function(k){f[k].addEventListener('change',apply);});
document.getElementById('f-reset').addEventListener('click',function(){
 ['domain','a','b'].forEach(function(k){f[k].value='';});
 ['disagree','fwf','failed'].forEach(function(k){f[k].checked=false;});apply();});
items.forEach(function(li,j){li.querySelector('a').addEventListener('click',function(e){e.preventDefault();show(j);
 window.scrollTo(0,0);});});
document.getElementById('prev').addEventListener('click',function(){step(-1);});
document.getElementById('next').addEventListener('click',function(){step(1);});
document.addEventListener('keydown',function(e){if(e.target.tagName==='SELECT'||e.target.tagName==='INPUT')return;
 if(e.key==='ArrowRight'||e.key==='j')step(1);if(e.key==='ArrowLeft'||e.key==='k')step(-1);});
if(cur<0&&secs.length)cur=0;
apply();show(cur);
})();
